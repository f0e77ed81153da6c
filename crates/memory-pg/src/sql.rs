//! The schema and the statements, written once per backend for its schema name and
//! embedding column type (the tables are described in the crate docs).

/// Largest vector pgvector stores.
pub(crate) const PGVECTOR_MAX_DIM: usize = 16_000;

/// Whether `v` fits in a pgvector `vector`.
pub(crate) fn fits_vector(v: &[f32]) -> bool {
    !v.is_empty() && v.len() <= PGVECTOR_MAX_DIM && v.iter().all(|x| x.is_finite())
}

/// The DDL for schema `s` (quoted) with embedding column type `emb_type`.
pub(crate) fn create_tables(s: &str, emb_type: &str) -> String {
    // Each written table bumps the version, once per statement (created once: replacing
    // a trigger would lock the table against writers on every connect).
    let triggers: String = ["memories", "relations"]
        .iter()
        .map(|t| {
            format!(
                r#"
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname = '{t}_version' AND tgrelid = '{s}.{t}'::regclass) THEN
        CREATE TRIGGER {t}_version
            AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {s}.{t}
            FOR EACH STATEMENT EXECUTE FUNCTION {s}.bump_version();
    END IF;
END
$$;
"#
            )
        })
        .collect();
    format!(
        r#"
CREATE TABLE IF NOT EXISTS {s}.memories (
    id text COLLATE "C" PRIMARY KEY,
    status text NOT NULL,
    tenant text NOT NULL,
    project text NOT NULL,
    session text NOT NULL,
    kind text NOT NULL,
    body json NOT NULL,
    embedding {emb_type},
    embedding_other real[]
);
CREATE INDEX IF NOT EXISTS memories_scope ON {s}.memories (tenant, project, status);
CREATE TABLE IF NOT EXISTS {s}.audit (
    seq bigserial PRIMARY KEY,
    memory text NOT NULL,
    entry json NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_memory ON {s}.audit (memory, seq);
CREATE TABLE IF NOT EXISTS {s}.relations (
    src text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    dst text COLLATE "C" NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (src, kind, dst)
);
CREATE INDEX IF NOT EXISTS relations_dst ON {s}.relations (dst);
CREATE INDEX IF NOT EXISTS relations_kind ON {s}.relations (kind);
CREATE TABLE IF NOT EXISTS {s}.version (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    v bigint NOT NULL
);
INSERT INTO {s}.version (v)
    VALUES ((extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
    ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION {s}.bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.version SET v = v + 1;
    RETURN NULL;
END
$$;
{triggers}"#
    )
}

/// The prepared statements, by index into [`Sql::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Q {
    Insert,
    Get,
    Lock,
    Write,
    AuditAdd,
    AuditGet,
    Ids,
    RelAdd,
    RelRemove,
    RelNode,
    RelKind,
    GetMany,
    GetManyBodies,
    RelNodes,
    Version,
}

impl Q {
    pub(crate) const COUNT: usize = 15;
}

/// The statements for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    text: [String; Q::COUNT],
    /// Start of a `SELECT` of memory rows (body, embedding, other embedding) up to the
    /// `FROM`; `list` adds its `WHERE`.
    pub(crate) select_memories: String,
}

impl Sql {
    /// Statements for schema `s` (quoted); `vector` is the pgvector type as the
    /// database names it, when the embedding column has that type.
    pub(crate) fn new(s: &str, vector: Option<&str>) -> Sql {
        let emb_in = match vector {
            Some(v) => format!("$8::real[]::{v}"),
            None => "$8::real[]".to_string(),
        };
        let cols = "body::text, embedding::real[], embedding_other";
        let select = format!("SELECT {cols} FROM {s}.memories");
        let text = [
            // Insert
            format!(
                "INSERT INTO {s}.memories \
                 (id, status, tenant, project, session, kind, body, embedding, embedding_other) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7::text::json, {emb_in}, $9::real[]) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            // Get
            format!("{select} WHERE id = $1"),
            // Lock
            format!("{select} WHERE id = $1 FOR UPDATE"),
            // Write
            format!(
                "UPDATE {s}.memories SET status = $2, tenant = $3, project = $4, session = $5, \
                 kind = $6, body = $7::text::json, embedding = {emb_in}, \
                 embedding_other = $9::real[] WHERE id = $1"
            ),
            // AuditAdd: in the order given, so `seq` follows it.
            format!(
                "INSERT INTO {s}.audit (memory, entry) \
                 SELECT $1::text, e::json FROM unnest($2::text[]) \
                 WITH ORDINALITY AS t(e, n) ORDER BY n"
            ),
            // AuditGet
            format!("SELECT entry::text FROM {s}.audit WHERE memory = $1 ORDER BY seq"),
            // Ids
            format!("SELECT id FROM {s}.memories ORDER BY id"),
            // RelAdd
            format!(
                "INSERT INTO {s}.relations (src, kind, dst, body) \
                 VALUES ($1, $2, $3, $4::text::json) ON CONFLICT DO NOTHING"
            ),
            // RelRemove
            format!("DELETE FROM {s}.relations WHERE src = $1 AND kind = $2 AND dst = $3"),
            // RelNode
            format!(
                "SELECT body::text FROM {s}.relations WHERE src = $1 OR dst = $1 \
                 ORDER BY src, kind, dst"
            ),
            // RelKind
            format!("SELECT body::text FROM {s}.relations WHERE kind = $1 ORDER BY src, dst"),
            // GetMany
            format!("{select} WHERE id = ANY($1)"),
            // GetManyBodies: the same without the vectors.
            format!(
                "SELECT body::text, NULL::real[], NULL::real[] FROM {s}.memories \
                 WHERE id = ANY($1)"
            ),
            // RelNodes
            format!(
                "SELECT body::text FROM {s}.relations WHERE src = ANY($1) OR dst = ANY($1) \
                 ORDER BY src, kind, dst"
            ),
            // Version
            format!("SELECT v FROM {s}.version"),
        ];
        Sql {
            text,
            select_memories: select,
        }
    }

    /// The text of a statement.
    pub(crate) fn text(&self, q: Q) -> &str {
        &self.text[q as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_limits() {
        assert!(fits_vector(&[0.0, 1.5]));
        assert!(!fits_vector(&[]));
        assert!(!fits_vector(&[f32::NAN]));
        assert!(!fits_vector(&[f32::INFINITY]));
        assert!(!fits_vector(&vec![0.0; PGVECTOR_MAX_DIM + 1]));
    }

    #[test]
    fn one_statement_per_query() {
        let sql = Sql::new("\"s\"", Some("vector"));
        for q in [Q::Insert, Q::RelKind] {
            assert!(!sql.text(q).is_empty());
        }
        assert!(sql.text(Q::Insert).contains("::vector"));
        assert!(!Sql::new("\"s\"", None).text(Q::Write).contains("vector"));
    }
}
