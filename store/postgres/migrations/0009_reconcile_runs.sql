-- The reports of reconciliation runs (package reconcile), newest last: when
-- a run started and finished, and its report as json (not jsonb), kept byte
-- for byte so GET /v1/ops/reconcile serves what the run wrote. Only the
-- newest runs are kept (store.Reconciler.ReconcileRunSave prunes the rest);
-- the report holds counts and ids, no personal data.
CREATE TABLE reconcile_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    report      json NOT NULL
);
