"""Swagger UI, vendored so that ``/api/v1/docs`` loads nothing from outside the controller (an
offline cluster's API docs are not blank): swagger-ui-dist 5.36.0 from the npm registry
(``npm pack swagger-ui-dist@5.36.0``), only the files the page needs, byte for byte as
published, under their Apache-2.0 licence (``LICENSE``, ``NOTICE``; the bundled libraries'
licences in ``swagger-ui-bundle.js.LICENSE.txt``). ``routers/apidocs.py`` serves them.

To update: ``npm pack swagger-ui-dist@VERSION``, copy the files of ``FILES`` from its
``package/`` here, set ``VERSION`` and the hashes (tests/unit/test_apidocs.py checks them)."""

from __future__ import annotations

VERSION = "5.36.0"
# the files served, by name, with their media types
FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "LICENSE": "text/plain; charset=utf-8",
    "NOTICE": "text/plain; charset=utf-8",
    "swagger-ui-bundle.js.LICENSE.txt": "text/plain; charset=utf-8",
}
# SHA-256 of each, as npm's tarball holds them
SHA256 = {
    "swagger-ui-bundle.js": "b164c5a22535e40dae08c00271674a67e437ec195098c55fcedf8ffac7ac3c88",
    "swagger-ui.css": "7eb9f5a125e4bc9b3f0b71869b66d1a3d7c501f972f53d44ef91c2ae6c5bda5e",
    "favicon-32x32.png": "3ed612f41e050ca5e7000cad6f1cbe7e7da39f65fca99c02e99e6591056e5837",
    "LICENSE": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "NOTICE": "0d20d1adef18aee3f40dd258172155521ce702ac445cb5f7b7d60ed32dad2fb2",
    "swagger-ui-bundle.js.LICENSE.txt": (
        "37eb6e7e59aed57b2c1acf076574b818ea07b74265717e0bd67b59e0baf9abbb"
    ),
}
