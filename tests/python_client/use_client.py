"""A Python user of Baton, through a client generated from a live node's OpenAPI document
by openapi-python-client (tests/openapi.rs generates it, then runs this): submit, list,
get, follow a log, cancel, and the errors, each as the typed value the document promises.

Reads BATON_URL and BATON_TOKEN; the generated package `baton_api` is on PYTHONPATH.
Prints "ok" and exits 0, or exits non-zero naming what did not hold.
"""

import os
import sys
import time
from http import HTTPStatus
from uuid import uuid4

import httpx
from baton_api import AuthenticatedClient
from baton_api.api.tasks import cancel_task, get_task, get_task_logs, list_tasks, submit_task
from baton_api.models import ErrorBody, SubmitTask, Task, TaskList, TaskStatus

ENDED = {
    TaskStatus.SUCCEEDED,
    TaskStatus.FAILED,
    TaskStatus.CANCELLED,
    TaskStatus.EXPIRED,
    TaskStatus.TIMED_OUT,
}


def check(holds, what):
    if not holds:
        sys.exit(f"FAILED: {what}")


def client_with(token):
    # Every status the document lists is parsed; any other is a failure of the document.
    return AuthenticatedClient(
        base_url=os.environ["BATON_URL"],
        token=token,
        raise_on_unexpected_status=True,
        timeout=httpx.Timeout(60.0),
    )


def wait_ended(client, task_id):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        task = get_task.sync(client=client, id=task_id)
        check(isinstance(task, Task), f"get gives a Task: {task!r}")
        if task.status in ENDED:
            return task
        time.sleep(0.1)
    sys.exit(f"FAILED: task {task_id} did not end within 60 s")


def main():
    client = client_with(os.environ["BATON_TOKEN"])

    made = submit_task.sync_detailed(
        client=client,
        body=SubmitTask(command=["sh", "-c", "echo hello from python; sleep 1; echo bye"]),
    )
    check(made.status_code == HTTPStatus.CREATED, f"submit answers 201: {made.status_code}")
    task = made.parsed
    check(isinstance(task, Task), f"submit gives a Task: {task!r}")
    check(task.status in (TaskStatus.QUEUED, TaskStatus.LEASED, TaskStatus.RUNNING), task.status)

    listed = list_tasks.sync(client=client, limit=100)
    check(isinstance(listed, TaskList), f"list gives a TaskList: {listed!r}")
    check(any(t.id == task.id for t in listed.tasks), "the task is listed")

    # Following the log holds the answer open until the task ends.
    followed = get_task_logs.sync_detailed(client=client, id=task.id, follow=True)
    check(followed.status_code == HTTPStatus.OK, f"logs answer 200: {followed.status_code}")
    check(b"hello from python" in followed.content, f"the log: {followed.content!r}")
    check(b"bye" in followed.content, f"the followed log runs to the end: {followed.content!r}")
    done = wait_ended(client, task.id)
    check(done.status == TaskStatus.SUCCEEDED, f"it succeeded: {done.status}")

    long = submit_task.sync(client=client, body=SubmitTask(command=["sleep", "60"]))
    check(isinstance(long, Task), f"submit gives a Task: {long!r}")
    cancelled = cancel_task.sync_detailed(client=client, id=long.id)
    check(cancelled.status_code == HTTPStatus.OK, f"cancel answers 200: {cancelled.status_code}")
    check(isinstance(cancelled.parsed, Task), f"cancel gives a Task: {cancelled.parsed!r}")
    check(
        cancelled.parsed.status in (TaskStatus.CANCELLING, TaskStatus.CANCELLED),
        f"it is cancelled: {cancelled.parsed.status}",
    )
    check(wait_ended(client, long.id).status == TaskStatus.CANCELLED, "it ends cancelled")

    missing = get_task.sync_detailed(client=client, id=uuid4())
    check(missing.status_code == HTTPStatus.NOT_FOUND, f"a missing task: {missing.status_code}")
    check(isinstance(missing.parsed, ErrorBody), f"a 404 is an ErrorBody: {missing.parsed!r}")
    check(missing.parsed.error.code == "not_found", missing.parsed.error.code)

    invalid = submit_task.sync_detailed(client=client, body=SubmitTask(command=[]))
    check(invalid.status_code == HTTPStatus.UNPROCESSABLE_ENTITY, f"{invalid.status_code}")
    check(isinstance(invalid.parsed, ErrorBody), f"a 422 is an ErrorBody: {invalid.parsed!r}")
    check("command" in invalid.parsed.error.message, invalid.parsed.error.message)

    stranger = list_tasks.sync_detailed(client=client_with("not-a-token"))
    check(stranger.status_code == HTTPStatus.UNAUTHORIZED, f"{stranger.status_code}")
    check(isinstance(stranger.parsed, ErrorBody), f"a 401 is an ErrorBody: {stranger.parsed!r}")

    print("ok")


if __name__ == "__main__":
    main()
