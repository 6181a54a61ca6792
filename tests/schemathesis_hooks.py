"""Hooks for tests/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

`POST /v1/import` takes an export stream as `application/x-ndjson`, which schemathesis has no
serializer for: the generated body (a string, as the document says) goes on the wire as text,
so the import's parser meets arbitrary text and must refuse it with a documented 4xx.
"""

import schemathesis

schemathesis.serializer.alias("application/x-ndjson", "text/plain")
