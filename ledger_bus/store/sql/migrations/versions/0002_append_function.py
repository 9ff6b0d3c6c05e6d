"""PostgreSQL: the append as a server-side function, one round trip.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import context, op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The rules of store/lua/append.lua, in its order: lock the session, the append_id first, then the
# expected version, then every event or none. A refusal raises (LBI01: the append_id was used for
# other events; LBV01: the stream's version, in DETAIL, is not the one expected), which undoes
# everything the call did. Cursors are taken under the session's row lock, held to COMMIT, from
# the last cursor and the server's clock: cursor order is commit order.
APPEND = r"""
CREATE OR REPLACE FUNCTION {p}append(
    p_session text, p_stream text, p_append_id text, p_expected bigint, p_digest text,
    p_payloads bytea[], p_notes text[], p_only_opens boolean, p_channel text
) RETURNS TABLE (o_outcome text, o_first bigint, o_last bigint, o_cursor text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    v_last text;
    v_events bigint;
    v_version bigint;
    v_prior record;
    v_now bigint;
    v_ms bigint;
    v_seq bigint;
    v_n int := array_length(p_payloads, 1);
    v_cursors text[] := '{{}}';
    v_note text;
    v_kind text;
    v_named text;
    v_opens boolean := false;
    i int;
BEGIN
    SELECT s.last_cursor, s.events INTO v_last, v_events
        FROM {p}sessions s WHERE s.session_id = p_session FOR UPDATE;
    IF NOT FOUND THEN  -- the session's first append, or two first appends racing
        INSERT INTO {p}sessions (session_id, last_cursor, events)
            VALUES (p_session, '0000000000000-000000', 0) ON CONFLICT (session_id) DO NOTHING;
        SELECT s.last_cursor, s.events INTO v_last, v_events
            FROM {p}sessions s WHERE s.session_id = p_session FOR UPDATE;
    END IF;
    SELECT d.digest, d.first_version, d.last_version, d.cursor INTO v_prior
        FROM {p}idempotency d
        WHERE d.session_id = p_session AND d.stream = p_stream AND d.append_id = p_append_id;
    IF FOUND THEN
        IF v_prior.digest <> p_digest THEN
            RAISE EXCEPTION 'the append_id was used for other events' USING ERRCODE = 'LBI01';
        END IF;
        RETURN QUERY SELECT 'dedup'::text, v_prior.first_version, v_prior.last_version,
            v_prior.cursor::text;
        RETURN;
    END IF;
    SELECT v.version INTO v_version FROM {p}streams v
        WHERE v.session_id = p_session AND v.stream = p_stream;
    v_version := coalesce(v_version, 0);
    IF p_expected IS NOT NULL AND p_expected <> v_version THEN
        RAISE EXCEPTION 'version conflict' USING ERRCODE = 'LBV01', DETAIL = v_version::text;
    END IF;
    v_now := CAST(extract(epoch FROM clock_timestamp()) * 1000 AS bigint);
    v_ms := CAST(split_part(v_last, '-', 1) AS bigint);
    v_seq := CAST(split_part(v_last, '-', 2) AS bigint);
    FOR i IN 1..v_n LOOP
        IF v_now > v_ms THEN
            v_ms := v_now;
            v_seq := 0;
        ELSE
            v_seq := v_seq + 1;
        END IF;
        v_cursors := v_cursors || (lpad(v_ms::text, 13, '0') || '-' || lpad(v_seq::text, 6, '0'));
    END LOOP;
    -- unnest, not p_payloads[k]: subscripting the array in a query copies it for every row.
    INSERT INTO {p}events (session_id, cursor, stream, version, payload)
        SELECT p_session, c, p_stream, v_version + k, pl
        FROM unnest(v_cursors, p_payloads) WITH ORDINALITY AS t(c, pl, k);
    INSERT INTO {p}streams (session_id, stream, version)
        VALUES (p_session, p_stream, v_version + v_n)
        ON CONFLICT (session_id, stream) DO UPDATE SET version = excluded.version;
    INSERT INTO {p}idempotency (session_id, stream, append_id, digest, first_version,
            last_version, cursor)
        VALUES (p_session, p_stream, p_append_id, p_digest, v_version + 1, v_version + v_n,
            v_cursors[v_n]);
    -- The common append requests calls and nothing else (p_only_opens, the caller knows): its
    -- attempts open in one statement. Any other mix is applied event by event, in order.
    IF p_only_opens THEN
        v_opens := true;
        INSERT INTO {p}open_attempts (session_id, attempt_id, run_id, tool, stream, cursor,
                flagged_cursor)
            SELECT p_session, split_part(n, E'\x1f', 2), split_part(n, E'\x1f', 3),
                split_part(n, E'\x1f', 4), p_stream, c, NULL
            FROM unnest(p_notes, v_cursors) AS t(n, c) WHERE n <> ''
            ON CONFLICT (session_id, attempt_id) DO UPDATE SET run_id = excluded.run_id,
                tool = excluded.tool, stream = excluded.stream, cursor = excluded.cursor,
                flagged_cursor = NULL;
    END IF;
    FOR i IN 1..(CASE WHEN p_only_opens THEN 0 ELSE v_n END) LOOP
        v_note := p_notes[i];
        CONTINUE WHEN v_note IS NULL OR v_note = '';
        v_kind := split_part(v_note, E'\x1f', 1);
        IF v_kind = 'o' THEN
            v_opens := true;
            INSERT INTO {p}open_attempts (session_id, attempt_id, run_id, tool, stream, cursor,
                    flagged_cursor)
                VALUES (p_session, split_part(v_note, E'\x1f', 2), split_part(v_note, E'\x1f', 3),
                    split_part(v_note, E'\x1f', 4), p_stream, v_cursors[i], NULL)
                ON CONFLICT (session_id, attempt_id) DO UPDATE SET run_id = excluded.run_id,
                    tool = excluded.tool, stream = excluded.stream, cursor = excluded.cursor,
                    flagged_cursor = NULL;
        ELSIF v_kind = 'c' THEN
            DELETE FROM {p}open_attempts
                WHERE session_id = p_session AND attempt_id = split_part(v_note, E'\x1f', 2);
        ELSIF v_kind = 'f' THEN
            v_named := split_part(v_note, E'\x1f', 3);
            CONTINUE WHEN v_named = '-';
            UPDATE {p}open_attempts SET flagged_cursor = v_cursors[i]
                WHERE session_id = p_session AND attempt_id = split_part(v_note, E'\x1f', 2)
                AND flagged_cursor IS NULL
                AND (v_named = '' OR cursor = lpad(split_part(v_named, '-', 1), 13, '0') || '-'
                    || lpad(split_part(v_named, '-', 2), 6, '0'));
        ELSIF v_kind = 's' THEN
            INSERT INTO {p}safe_tools (session_id, run_id, tool)
                VALUES (p_session, split_part(v_note, E'\x1f', 2), split_part(v_note, E'\x1f', 3))
                ON CONFLICT DO NOTHING;
        END IF;
    END LOOP;
    UPDATE {p}sessions SET last_cursor = v_cursors[v_n], events = v_events + v_n,
            opened_ms = CASE WHEN v_opens THEN v_now ELSE opened_ms END
        WHERE session_id = p_session;
    PERFORM pg_notify(p_channel, p_session);
    RETURN QUERY SELECT 'ok'::text, v_version + 1, v_version + v_n, v_cursors[v_n];
END;
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite runs no server-side code: the store sends the statements itself
    op.execute(APPEND.format(p=f"{context.config.attributes['prefix']}_"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    prefix = context.config.attributes["prefix"]
    op.execute(
        f"DROP FUNCTION IF EXISTS {prefix}_append(text, text, text, bigint, text, bytea[],"
        " text[], boolean, text)"
    )
