"""One construct per capability: ingest, workflow, ledger, notifications, access, observability."""
