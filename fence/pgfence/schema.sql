-- quorumlock fence: the PostgreSQL tables, for those who manage migrations
-- themselves. Every statement is idempotent. The Go package holds the same
-- DDL: pgfence.Schema, and pgfence.Guard.Migration() for a guarded table.

-- The authoritative counter of pgfence.Counter: one row per resource (named
-- <domain>:<id>, e.g. alloc:WH-01), holding the last fence minted for it.
-- Mint increments it in one statement; Seed raises it, never lowers it.
-- Never lower a value by hand: the next fences would repeat ones already
-- handed out, and guarded tables would refuse honest writers.
CREATE TABLE IF NOT EXISTS quorumlock_fence (
    resource text PRIMARY KEY,
    value    bigint NOT NULL CHECK (value > 0)
);

-- An example of a table guarded by pgfence.Guard{Table: "inventory"}: the
-- fence column stores the fence of the last write that changed the row, and
-- Guard.Update changes a row only when the writer's fence is not older.
-- Rows created before the guard, or inserted without a fence, hold 0, which
-- every fence (1 and up) passes.
CREATE TABLE IF NOT EXISTS inventory (
    sku   text PRIMARY KEY,
    qty   int NOT NULL,
    fence bigint NOT NULL DEFAULT 0
);

-- The same column added to an existing table: what Guard.Migration()
-- returns for Table "inventory". NOT NULL matters: a NULL fence refuses
-- every writer.
ALTER TABLE inventory ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;
