"""The issuing core: the identity holder and its keeper (:mod:`app.issuing.holder`), the issuers and the node
(:mod:`app.issuing.node`), and the fleet guard (:mod:`app.issuing.fleet`)."""
