"""Schemathesis hooks for Baton's OpenAPI run (tests/openapi.rs).

A followed log (`follow=true`) streams until its task ends, by design; the fuzzer's tasks
never run, so such a request would only hang until the fuzzer gives up. Leave it out.
Runner and schedule operations get the ids of runners and schedules that exist.
"""

import os

import schemathesis


@schemathesis.hook
def filter_query(ctx, query):
    return not (query and str(query.get("follow")).lower() in ("true", "1"))


# Runner ids the test registered before the run (`BATON_ST_RUNNER_IDS`): a random id
# only ever meets 404, so the runner operations are given ones that exist, and reach
# their handlers (a DELETE may take one away: later calls on it meet 404, as they should).
RUNNER_IDS = [i for i in os.environ.get("BATON_ST_RUNNER_IDS", "").split(",") if i]
# The same for schedules (`BATON_ST_SCHEDULE_IDS`) and pipelines (`BATON_ST_PIPELINE_IDS`,
# each with a job named `a`).
SCHEDULE_IDS = [i for i in os.environ.get("BATON_ST_SCHEDULE_IDS", "").split(",") if i]
PIPELINE_IDS = [i for i in os.environ.get("BATON_ST_PIPELINE_IDS", "").split(",") if i]


def path_of(ctx):
    """The path template of the operation a hook is called for ("" when none)."""
    return ctx.operation.path if ctx.operation is not None else ""


@schemathesis.hook
def map_path_parameters(ctx, path_parameters):
    for prefix, ids in (
        ("/v1/runners/", RUNNER_IDS),
        ("/v1/schedules/", SCHEDULE_IDS),
        ("/v1/pipelines/", PIPELINE_IDS),
    ):
        if ids and path_of(ctx).startswith(prefix) and path_parameters and "id" in path_parameters:
            # Deterministic, so a failing example replays the same way.
            pick = sum(str(path_parameters["id"]).encode()) % len(ids)
            path_parameters["id"] = ids[pick]
            if "job" in path_parameters:
                path_parameters["job"] = "a"
    return path_parameters


# The bootstrap registration token of the node under test (`BATON_ST_REGISTRATION_TOKEN`).
# A registration is authorized by the token in its body, which a fuzzer never guesses:
# without it every registration meets 401, and the handler past that is never reached.
REGISTRATION_TOKEN = os.environ.get("BATON_ST_REGISTRATION_TOKEN")


@schemathesis.hook
def map_body(ctx, body):
    if (
        REGISTRATION_TOKEN
        and path_of(ctx) == "/v1/runner/register"
        and isinstance(body, dict)
        # Only a token of the right type is swapped: a case made to violate the schema
        # there (null, a number) must stay invalid, and be refused.
        and isinstance(body.get("registration_token"), str)
    ):
        body["registration_token"] = REGISTRATION_TOKEN
    return body
