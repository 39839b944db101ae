"""Schemathesis hooks for Baton's OpenAPI run (tests/openapi.rs).

A followed log (`follow=true`) streams until its task ends, by design; the fuzzer's tasks
never run, so such a request would only hang until the fuzzer gives up. Leave it out.
"""

import schemathesis


@schemathesis.hook
def filter_query(ctx, query):
    return not (query and str(query.get("follow")).lower() in ("true", "1"))
