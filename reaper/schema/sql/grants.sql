-- The queries of `reaper db grants ROLE` and of `reaper doctor`'s privilege checks
-- (reaper/schema/grants.py): which tables the reaper needs are here, and what a role holds.

-- name: grant_tables --
-- For each table the reaper needs ($1), its schema-qualified name (NULL: not in this
-- database) and the sequences it owns (serial or identity columns), for `reaper db grants`.
SELECT t.name,
       c.oid IS NOT NULL AS present,
       n.nspname AS schema,
       coalesce(array_agg(DISTINCT s.relname) FILTER (WHERE s.oid IS NOT NULL), '{}') AS sequences,
       coalesce(array_agg(DISTINCT sn.nspname) FILTER (WHERE s.oid IS NOT NULL), '{}') AS sequence_schemas
FROM unnest($1::text[]) AS t (name)
LEFT JOIN pg_class AS c ON c.oid = to_regclass(t.name)
LEFT JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_depend AS d
       ON d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid
      AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
LEFT JOIN pg_class AS s ON s.oid = d.objid AND s.relkind = 'S'
LEFT JOIN pg_namespace AS sn ON sn.oid = s.relnamespace
GROUP BY t.name, c.oid, n.nspname
ORDER BY t.name;

-- name: role_exists --
-- Whether the role $1 exists.
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1::text) AS present;

-- name: privileges_held --
-- Whether role $1 holds each privilege: $2 the objects (schema-qualified), $3 their kinds
-- (table, sequence, schema), $4 the privileges, one each.
SELECT o.object, o.kind, o.privilege,
       CASE o.kind
           WHEN 'table' THEN has_table_privilege($1::text, o.object, o.privilege)
           WHEN 'sequence' THEN has_sequence_privilege($1::text, o.object, o.privilege)
           ELSE has_schema_privilege($1::text, o.object, o.privilege)
       END AS held
FROM unnest($2::text[], $3::text[], $4::text[]) AS o (object, kind, privilege);
