//! Keys ready to shard by tenant (PostgreSQL): every tenant-owned table's
//! primary key, unique constraints and foreign keys to another
//! tenant-owned table start with `tenant_id`, as Citus requires of tables
//! distributed by it and co-located (`docs/scale-out.md`).
//!
//! The rewrite is by rule, not by list, so it covers every table whose
//! `tenant_id` is required (also `memory_embeddings`, made at start-up, when it exists):
//!
//! 1. each foreign key from one tenant table to another is remembered and
//!    dropped;
//! 2. each primary key without `tenant_id` becomes `(tenant_id, …)` under
//!    its old name;
//!    A plain index that then repeats the primary key (`(tenant_id, id)`,
//!    made for tenant pages on `tasks`, `memories`, `kg_entities`,
//!    `reviews`) is dropped: every write paid for both;
//! 3. the foreign keys come back as `(tenant_id, …) REFERENCES parent
//!    (tenant_id, …)` with their old action (`SET NULL` only on the
//!    referencing column, never on `tenant_id`);
//! 4. the two unique constraints without `tenant_id` get it first:
//!    `webhook_deliveries (endpoint_id, task_id, seq)`, and `api_keys
//!    (secret_hash)`, which keeps a plain index on the hash (a key is found
//!    by its hash before its tenant is known).
//!
//! Foreign keys to `tenants` and to the capability catalogue (tables
//! without `tenant_id`: reference tables on Citus) stay as they are. So
//! does `audit_log`, whose `tenant_id` is empty on platform rows: it is
//! the one table that holds both (`docs/scale-out.md` says how it splits).
//! `tests/e2e/tenant_keys.rs` checks the rule over the live schema.
//! SQLite is one database, never sharded: its keys stay (the mentions'
//! key gains a unique index with the tenant, which the entity names).

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Steps 1–3, in one block so the remembered keys need no table of their own.
const REKEY: &str = r#"
DO $$
DECLARE
  r record;
  fk record;
  fks jsonb := '[]'::jsonb;
  action text;
BEGIN
  -- 1. Foreign keys between tenant tables that do not name tenant_id.
  FOR fk IN
    SELECT c.conname, c.conrelid::regclass::text AS child, c.confrelid::regclass::text AS parent,
           c.confdeltype,
           (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
              FROM unnest(c.conkey) WITH ORDINALITY AS k(n, ord)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) AS cols,
           (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
              FROM unnest(c.confkey) WITH ORDINALITY AS k(n, ord)
              JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n) AS refcols
    FROM pg_constraint c
    WHERE c.contype = 'f'
      AND c.connamespace = 'public'::regnamespace
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid
                  AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped)
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.confrelid
                  AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped)
      AND NOT EXISTS (SELECT 1 FROM unnest(c.conkey) AS k(n)
                      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                      WHERE a.attname = 'tenant_id')
  LOOP
    fks := fks || jsonb_build_object('name', fk.conname, 'child', fk.child, 'parent', fk.parent,
                                     'type', fk.confdeltype, 'cols', fk.cols, 'refcols', fk.refcols);
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.child, fk.conname);
  END LOOP;

  -- 2. Primary keys of tenant tables that do not start with tenant_id.
  FOR r IN
    SELECT c.conname, c.conrelid::regclass::text AS tbl,
           (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
              FROM unnest(c.conkey) WITH ORDINALITY AS k(n, ord)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) AS cols
    FROM pg_constraint c
    WHERE c.contype = 'p'
      AND c.connamespace = 'public'::regnamespace
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid
                  AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped)
      AND NOT EXISTS (SELECT 1 FROM unnest(c.conkey) AS k(n)
                      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                      WHERE a.attname = 'tenant_id')
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY (tenant_id, %s)',
                   r.tbl, r.conname, r.cols);
  END LOOP;

  -- 2b. Plain indexes that now repeat their table's primary key
  -- (`(tenant_id, id)`, made for tenant pages): every write paid for both.
  FOR r IN
    SELECT i.indexrelid::regclass::text AS idx
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_index p ON p.indrelid = i.indrelid AND p.indisprimary
    WHERE c.relnamespace = 'public'::regnamespace
      AND NOT i.indisprimary AND NOT i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
      AND i.indkey::text = p.indkey::text
      AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')
  LOOP
    EXECUTE format('DROP INDEX %s', r.idx);
  END LOOP;

  -- 3. The foreign keys again, through the tenant.
  FOR fk IN SELECT * FROM jsonb_to_recordset(fks)
      AS x(name text, child text, parent text, type text, cols text, refcols text)
  LOOP
    action := CASE fk.type
      WHEN 'c' THEN 'ON DELETE CASCADE'
      WHEN 'n' THEN format('ON DELETE SET NULL (%s)', fk.cols)
      WHEN 'd' THEN format('ON DELETE SET DEFAULT (%s)', fk.cols)
      WHEN 'r' THEN 'ON DELETE RESTRICT'
      ELSE 'ON DELETE NO ACTION'
    END;
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (tenant_id, %s) REFERENCES %s (tenant_id, %s) %s',
                   fk.child, fk.name, fk.cols, fk.parent, fk.refcols, action);
  END LOOP;
END $$;
"#;

/// SQLite keeps its keys, but the mentions' key gets the tenant as a
/// unique index, matching the entity's key.
const SQLITE_MENTIONS: &str = "CREATE UNIQUE INDEX IF NOT EXISTS uq_memory_mentions_tenant \
     ON memory_mentions (tenant_id, memory_id, entity_id)";

/// Step 4.
const UNIQUE: &str = "\
DROP INDEX IF EXISTS uq_webhook_deliveries_event; \
CREATE UNIQUE INDEX uq_webhook_deliveries_event ON webhook_deliveries (tenant_id, endpoint_id, task_id, seq); \
DROP INDEX IF EXISTS uq_api_keys_secret_hash; \
CREATE UNIQUE INDEX uq_api_keys_tenant_secret_hash ON api_keys (tenant_id, secret_hash); \
CREATE INDEX ix_api_keys_secret_hash ON api_keys (secret_hash); \
DROP INDEX IF EXISTS ix_memory_embeddings_tenant";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            // The entity's key (tenant, memory, entity) is what SeaORM's
            // upserts of mentions name.
            manager
                .get_connection()
                .execute_unprepared(SQLITE_MENTIONS)
                .await?;
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(REKEY).await?;
        db.execute_unprepared(UNIQUE).await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        // Keys that include the tenant are keys the old code also works
        // with: nothing to undo.
        Ok(())
    }
}
