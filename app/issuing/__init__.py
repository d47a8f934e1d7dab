"""The issuing core: each scheme's identity holder and its keeper (:mod:`app.issuing.holder`), the issuers
(:mod:`app.issuing.issuer`: the hot path, the charge of every ID handed out, accounting), the node that builds, starts
and stops them (:mod:`app.issuing.node`), and the fleet guard (:mod:`app.issuing.fleet`). It sits above the schemes
(and the identity pool they declare), storage and the claim ledger, and below the API (``tests/test_imports.py``)."""
