-- BirdDog's runtime SQL: every statement the adapters run, one named block each.
--
-- Block format (read by birddog/postgres/sql.py):
--   -- name: <name>
--   -- <one line: what the statement does>
--   -- params: $1 <name> <type>, $2 ...   (or: none)
--   <the statement>
-- A part several statements share is a fragment block, written once:
--   -- fragment: <name>
--   -- <one line: what the part does>
--   -- params: $1 <name> <type>, ...   (or: none)
--   <the part>
-- and a statement names it where it belongs, mapping its parameters to the statement's:
-- {{<name>($4, $5)}} (or {{<name>}}). sql.py writes the fragments out once, at load, each
-- line after the first indented like the line naming it; an unknown or unused fragment
-- is refused.
--
-- The schema comes from the Alembic revisions in migrations/. Keys are COLLATE "C", so
-- "key > $1 ORDER BY key" is UTF-8 byte order, the same order as Python's str.
-- Times that drive delivery (due, lease) come from the caller's clock as parameters;
-- now() only stamps bookkeeping columns (updated_at, dead_at).

-- ---------------------------------------------------------------------------------------
-- outbox
-- ---------------------------------------------------------------------------------------

-- name: outbox_insert_rows
-- Insert owed replies from parallel arrays (a key that has a row or a receipt is left alone), holding the wake lock shared until the transaction ends.
-- params: $1 keys text[], $2 recipient_agent_ids text[], $3 recipient_session_ids text[], $4 in_reply_tos text[], $5 command_ids text[], $6 outcomes text[], $7 replies text[] (JSON), $8 states text[], $9 attempts int4[], $10 deferrals int4[], $11 due_ats timestamptz[], $12 created_ats timestamptz[], $13 last_errors text[], $14 dead_reasons text[], $15 traceparents text[]
INSERT INTO birddog.outbox AS o (
    key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome,
    reply, state, attempts, deferrals, due_at, created_at, last_error, dead_reason, dead_at,
    traceparent
)
SELECT
    r.key, r.recipient_agent_id, r.recipient_session_id, r.in_reply_to, r.command_id,
    r.outcome, r.reply::jsonb, r.state, r.attempts, r.deferrals, r.due_at, r.created_at,
    r.last_error, r.dead_reason, CASE WHEN r.state = 'dead' THEN now() END, r.traceparent
FROM unnest(
    $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
    $8::text[], $9::int4[], $10::int4[], $11::timestamptz[], $12::timestamptz[],
    $13::text[], $14::text[], $15::text[]
) AS r(
    key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome,
    reply, state, attempts, deferrals, due_at, created_at, last_error, dead_reason,
    traceparent
)
-- The settlement side of the wake protocol (see wake_guard): the wake statement that
-- follows in this transaction takes its snapshot only after this lock is granted.
CROSS JOIN (SELECT pg_advisory_xact_lock_shared(27700487749136231)) AS guard
WHERE NOT EXISTS (SELECT 1 FROM birddog.receipts rc WHERE rc.key = r.key)
ON CONFLICT (key) DO NOTHING
RETURNING o.key;

-- fragment: outbox_claimable
-- What else a pending row needs to be claimable at $1: no live lease, its recipient not in $2, its route not disabled.
-- params: $1 now timestamptz, $2 skip_agents text[]
-- Each claim (and outbox_next_claimable_at) writes its own state and due-time conditions
-- (the page puts its key condition between them and this) and ANDs this after them; a
-- condition every claimable row must meet goes here. outbox_claim_heads says the
-- recipient ones again, of r.agent, in its heads part: a new one goes there too.
AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= $1::timestamptz)
AND NOT (o.recipient_agent_id = ANY($2::text[]))
AND NOT EXISTS (
    SELECT 1 FROM birddog.routes r
    WHERE r.agent_id = o.recipient_agent_id AND NOT r.enabled
)

-- fragment: outbox_lease
-- Lease the rows of the statement's CTE due (key, recipient_agent_id) to claim $1 until $2; each with its route's kind, batch size and policy, and its reply as JSON text (posted as is).
-- params: $1 claim uuid, $2 lease_until timestamptz
-- Every claim ends with this, so the engine reads one shape of claimed row whichever
-- claim ran (tests/unit/test_claim_columns.py); a column for it goes here.
UPDATE birddog.outbox o
SET claim_token = $1::uuid, lease_expires_at = $2::timestamptz, updated_at = now()
FROM due
LEFT JOIN birddog.routes r ON r.agent_id = due.recipient_agent_id
WHERE o.key = due.key
RETURNING
    o.key, o.recipient_agent_id, o.reply::text AS reply_json, o.state, o.attempts,
    o.deferrals, o.due_at, o.created_at, o.last_error, o.dead_reason, o.traceparent,
    r.kind AS route_kind,
    r.batch_size AS route_batch_size,
    r.post_timeout_s AS route_post_timeout_s,
    r.max_age_s AS route_max_age_s,
    r.max_attempts AS route_max_attempts

-- name: outbox_claim_page
-- Lease up to $3 due, unheld, unleased pending rows after key $1, in key order, skipping recipients $6; with each row's route kind, batch size and policy, and its reply as JSON text (posted as is).
-- params: $1 after_key text ('' for the start), $2 now timestamptz, $3 limit int, $4 claim uuid, $5 lease_until timestamptz, $6 skip_agents text[]
WITH due AS (
    SELECT o.key, o.recipient_agent_id
    FROM birddog.outbox o
    WHERE o.state = 'pending'
      AND o.due_at <= $2::timestamptz
      AND o.key > $1::text
      {{outbox_claimable($2, $6)}}
    ORDER BY o.key
    LIMIT $3::int
    FOR UPDATE OF o SKIP LOCKED
)
{{outbox_lease($4, $5)}};

-- name: outbox_claim_due
-- Lease up to $6 + $2 claimable rows (due, unheld, unleased, recipients not in $5): the $6 latest-due, then $2 earliest-due; with each row's route kind, batch size and policy, and its reply as JSON text (posted as is).
-- params: $1 now timestamptz, $2 limit int (the earliest-due part), $3 claim uuid, $4 lease_until timestamptz, $5 skip_agents text[], $6 newest int
-- Due order reads the partial due-time index from its start and stops after $2 rows, so
-- its cost is the page (plus rows in flight), whatever the future backlog. The few
-- latest-due rows (read backwards from $1) let a fresh reply overtake a backlog. Both
-- limits are plain parameters, so the planner knows them and walks the index.
WITH newest AS (
    SELECT o.key, o.recipient_agent_id
    FROM birddog.outbox o
    WHERE o.state = 'pending'
      AND o.due_at <= $1::timestamptz
      {{outbox_claimable($1, $5)}}
    ORDER BY o.due_at DESC
    LIMIT $6::int
    FOR UPDATE OF o SKIP LOCKED
), earliest AS (
    SELECT o.key, o.recipient_agent_id
    FROM birddog.outbox o
    WHERE o.state = 'pending'
      AND o.due_at <= $1::timestamptz
      {{outbox_claimable($1, $5)}}
      AND NOT EXISTS (SELECT 1 FROM newest n WHERE n.key = o.key)
    ORDER BY o.due_at
    LIMIT $2::int
    FOR UPDATE OF o SKIP LOCKED
), due AS (
    SELECT * FROM newest
    UNION ALL
    SELECT * FROM earliest
)
{{outbox_lease($3, $4)}};

-- name: outbox_claim_heads
-- Lease what outbox_claim_due leases ($6 latest-due, then $2 earliest-due claimable rows, recipients not in $5), reading the earliest-due part from each other recipient's head: at most $7 rows of each.
-- params: $1 now timestamptz, $2 limit int (the earliest-due part), $3 claim uuid, $4 lease_until timestamptz, $5 skip_agents text[], $6 newest int, $7 per_recipient int
-- The claim while some recipients are left out (they hold all they may). In due order
-- the claim reads past every due row of theirs (bench/hanging.py: four of five); here
-- one probe of the (recipient, due time) index finds each recipient with pending rows
-- (a loose index scan), and only
-- the others' earliest due rows are read, at most $7 each, before the best $2 are
-- locked. Its cost grows with the recipients that have rows, not with their rows.
WITH RECURSIVE recipients AS (
    (
        SELECT o.recipient_agent_id AS agent
        FROM birddog.outbox o
        WHERE o.state <> 'dead'
        ORDER BY o.recipient_agent_id
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT o.recipient_agent_id
        FROM birddog.outbox o
        WHERE o.state <> 'dead' AND o.recipient_agent_id > r.agent
        ORDER BY o.recipient_agent_id
        LIMIT 1
    )
    FROM recipients r
    WHERE r.agent IS NOT NULL
), newest AS (
    SELECT o.key, o.recipient_agent_id
    FROM birddog.outbox o
    WHERE o.state = 'pending'
      AND o.due_at <= $1::timestamptz
      {{outbox_claimable($1, $5)}}
    ORDER BY o.due_at DESC
    LIMIT $6::int
    FOR UPDATE OF o SKIP LOCKED
), heads AS (
    SELECT h.key
    FROM recipients r
    CROSS JOIN LATERAL (
        SELECT o.key, o.due_at
        FROM birddog.outbox o
        WHERE o.recipient_agent_id = r.agent
          AND o.due_at <= $1::timestamptz
          -- Pending, said as the recipient index's predicate: the due-time index's
          -- ('pending') is then not implied, so the planner cannot walk that one past
          -- every other recipient's rows (it guesses each recipient's rows spread evenly
          -- over due times and took it, at 40 times the cost).
          AND o.state <> 'dead'
          AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= $1::timestamptz)
        ORDER BY o.due_at
        LIMIT $7::int
    ) h
    WHERE r.agent IS NOT NULL
      AND NOT (r.agent = ANY($5::text[]))
      AND NOT EXISTS (
          SELECT 1 FROM birddog.routes rt WHERE rt.agent_id = r.agent AND NOT rt.enabled
      )
      AND NOT EXISTS (SELECT 1 FROM newest n WHERE n.key = h.key)
    ORDER BY h.due_at
    LIMIT $2::int
), earliest AS (
    SELECT o.key, o.recipient_agent_id
    FROM birddog.outbox o
    JOIN heads h ON h.key = o.key
    WHERE o.state = 'pending'
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= $1::timestamptz)
    FOR UPDATE OF o SKIP LOCKED
), due AS (
    SELECT * FROM newest
    UNION ALL
    SELECT * FROM earliest
)
{{outbox_lease($3, $4)}};

-- name: outbox_swap_receipts
-- Replace delivered rows still held by their claim ($1, per row) with their receipts (attempt log: the row's plus entry n of $9); rows flagged $10 are also written to the mailbox table; returns the keys swapped.
-- params: $1 claims uuid[], $2 keys text[], $3 delivered_ats timestamptz[], $4 attempts int4[], $5 recipient_agent_ids text[], $6 recipient_session_ids text[], $7 command_ids text[], $8 outcomes text[], $9 attempt_entries text (a JSON array, one entry or null per key), $10 mailbox boolean[]
WITH receipt AS (
    SELECT *
    FROM unnest(
        $1::uuid[], $2::text[], $3::timestamptz[], $4::int4[], $5::text[], $6::text[],
        $7::text[], $8::text[], $10::boolean[]
    ) WITH ORDINALITY AS r(
        claim, key, delivered_at, attempts, recipient_agent_id, recipient_session_id,
        command_id, outcome, mailbox, n
    )
), gone AS (
    -- The reply only for the mailbox's rows: the others' would be copied for nothing.
    DELETE FROM birddog.outbox o
    USING receipt r
    WHERE o.key = r.key AND o.claim_token = r.claim
    RETURNING o.key, o.in_reply_to, CASE WHEN r.mailbox THEN o.reply END AS reply, o.attempt_log
), stored AS (
    INSERT INTO birddog.receipts (
        key, delivered_at, attempts, recipient_agent_id, recipient_session_id, command_id,
        outcome, attempt_log
    )
    SELECT
        r.key, r.delivered_at, r.attempts, r.recipient_agent_id, r.recipient_session_id,
        r.command_id, r.outcome,
        -- The row's log and this attempt (an entry that is not an object: none), last 20;
        -- a CASE, not a JSON path, for the usual short log (a tenth of the swap's CPU).
        CASE
            WHEN jsonb_typeof($9::text::jsonb -> (r.n::int - 1)) IS DISTINCT FROM 'object'
                THEN g.attempt_log
            WHEN jsonb_array_length(g.attempt_log) < 20
                THEN g.attempt_log || jsonb_build_array($9::text::jsonb -> (r.n::int - 1))
            ELSE jsonb_path_query_array(
                g.attempt_log || jsonb_build_array($9::text::jsonb -> (r.n::int - 1)),
                '$[last - 19 to last]'
            )
        END
    FROM receipt r
    JOIN gone g ON g.key = r.key
    ON CONFLICT (key) DO NOTHING
), delivered AS (
    INSERT INTO birddog.mailbox (
        key, agent_id, session_id, in_reply_to, command_id, outcome, reply, delivered_at
    )
    SELECT
        r.key, r.recipient_agent_id, r.recipient_session_id, g.in_reply_to, r.command_id,
        r.outcome, g.reply, r.delivered_at
    FROM receipt r
    JOIN gone g ON g.key = r.key
    WHERE r.mailbox
    ON CONFLICT (key) DO NOTHING
)
SELECT g.key FROM gone g;

-- name: outbox_update_rows
-- Store retried, deferred and dead rows still held by their claim ($1, per row), appending entry n of $9 to each row's attempt log (the last 20 kept), and release the claim.
-- params: $1 claims uuid[], $2 keys text[], $3 states text[], $4 attempts int4[], $5 deferrals int4[], $6 due_ats timestamptz[], $7 last_errors text[], $8 dead_reasons text[], $9 attempt_entries text (a JSON array, one entry or null per key)
UPDATE birddog.outbox o
SET state = u.state,
    attempts = u.attempts,
    deferrals = u.deferrals,
    due_at = u.due_at,
    last_error = u.last_error,
    dead_reason = u.dead_reason,
    dead_at = CASE WHEN u.state = 'dead' THEN coalesce(o.dead_at, now()) END,
    -- As in outbox_swap_receipts: this attempt appended when it is an object, last 20.
    attempt_log = CASE
        WHEN jsonb_typeof($9::text::jsonb -> (u.n::int - 1)) IS DISTINCT FROM 'object'
            THEN o.attempt_log
        WHEN jsonb_array_length(o.attempt_log) < 20
            THEN o.attempt_log || jsonb_build_array($9::text::jsonb -> (u.n::int - 1))
        ELSE jsonb_path_query_array(
            o.attempt_log || jsonb_build_array($9::text::jsonb -> (u.n::int - 1)),
            '$[last - 19 to last]'
        )
    END,
    claim_token = NULL,
    lease_expires_at = NULL,
    updated_at = now()
FROM unnest(
    $1::uuid[], $2::text[], $3::text[], $4::int4[], $5::int4[], $6::timestamptz[],
    $7::text[], $8::text[]
) WITH ORDINALITY AS u(
    claim, key, state, attempts, deferrals, due_at, last_error, dead_reason, n
)
WHERE o.key = u.key AND o.claim_token = u.claim
RETURNING o.key, o.state;

-- name: outbox_notify_dead
-- Announce each dead letter on channel birddog_dead; Postgres delivers it at commit.
-- params: $1 keys text[]
SELECT pg_notify('birddog_dead', k) FROM unnest($1::text[]) AS k;

-- name: outbox_notify_mailbox
-- Announce new mailbox replies on channel birddog_mailbox, once per agent id; delivered at commit.
-- params: $1 agent_ids text[]
SELECT pg_notify('birddog_mailbox', a) FROM (SELECT DISTINCT unnest($1::text[]) AS a) AS agents;

-- name: outbox_get_row
-- The pending or dead row under a key.
-- params: $1 key text
SELECT
    o.key, o.reply, o.state, o.attempts, o.deferrals, o.due_at, o.created_at,
    o.last_error, o.dead_reason
FROM birddog.outbox o
WHERE o.key = $1::text;

-- name: outbox_get_receipt
-- The receipt under a key.
-- params: $1 key text
SELECT
    rc.key, rc.delivered_at, rc.attempts, rc.recipient_agent_id, rc.recipient_session_id,
    rc.command_id, rc.outcome
FROM birddog.receipts rc
WHERE rc.key = $1::text;

-- name: outbox_has_pending
-- Whether any reply still awaits a delivery attempt (held ones included).
-- params: none
SELECT EXISTS (SELECT 1 FROM birddog.outbox o WHERE o.state = 'pending');

-- name: outbox_next_due_at
-- The earliest due time of a pending reply whose recipient is not held (no row: none).
-- params: none
-- ORDER BY ... LIMIT 1, not min(): with the anti-join, min() scanned every pending row
-- (a parallel seq scan, ~0.8 s at 1M rows, run before every drain page); this reads the
-- due-time index from its start and stops at the first unheld row (bench/backlog.py).
SELECT o.due_at
FROM birddog.outbox o
WHERE o.state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM birddog.routes r
      WHERE r.agent_id = o.recipient_agent_id AND NOT r.enabled
  )
ORDER BY o.due_at
LIMIT 1;

-- name: outbox_next_claimable_at
-- The earliest due time of a row a claim at $1 could take (pending, unleased or lease ended, recipient neither held nor in $2).
-- params: $1 now timestamptz, $2 skip_agents text[]
-- Rows under a live lease do not count: their drainer stores them (arming a wake for a
-- retry), and a drainer that died is found by the next look after the lease ends.
SELECT o.due_at
FROM birddog.outbox o
WHERE o.state = 'pending'
  {{outbox_claimable($1, $2)}}
ORDER BY o.due_at
LIMIT 1;

-- name: outbox_dead_recipients
-- The recipients of the dead letters outbox_replay would put back, by agent id.
-- params: $1 key text (null: any key), $2 recipient_agent_id text (null: any recipient)
SELECT DISTINCT o.recipient_agent_id
FROM birddog.outbox o
WHERE o.state = 'dead'
  AND ($1::text IS NULL OR o.key = $1::text)
  AND ($2::text IS NULL OR o.recipient_agent_id = $2::text)
ORDER BY o.recipient_agent_id;

-- name: outbox_replay
-- Put dead letters back to pending under the same key: due now, fresh attempts and age.
-- params: $1 key text (null: any key), $2 recipient_agent_id text (null: any recipient)
UPDATE birddog.outbox o
SET state = 'pending',
    attempts = 0,
    deferrals = 0,
    due_at = now(),
    created_at = now(),
    dead_reason = NULL,
    dead_at = NULL,
    claim_token = NULL,
    lease_expires_at = NULL,
    updated_at = now()
WHERE o.state = 'dead'
  AND ($1::text IS NULL OR o.key = $1::text)
  AND ($2::text IS NULL OR o.recipient_agent_id = $2::text)
RETURNING o.key, o.due_at;

-- name: outbox_counts
-- Rows by state, held and in-flight counts, the oldest pending row and the next due time.
-- params: none
SELECT
    count(*) FILTER (WHERE o.state = 'pending') AS pending,
    count(*) FILTER (WHERE o.state = 'dead') AS dead,
    count(*) FILTER (WHERE o.state = 'pending' AND r.enabled IS FALSE) AS held,
    count(*) FILTER (WHERE o.state = 'pending' AND o.lease_expires_at > now()) AS in_flight,
    min(o.created_at) FILTER (WHERE o.state = 'pending') AS oldest_pending_at,
    min(o.due_at) FILTER (
        WHERE o.state = 'pending' AND r.enabled IS NOT FALSE
    ) AS next_due_at
FROM birddog.outbox o
LEFT JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id;

-- name: outbox_list_pending
-- The oldest pending rows, as the birddog.pending view shows them.
-- params: $1 limit int
SELECT
    p.key, p.recipient_agent_id, p.recipient_session_id, p.in_reply_to, p.command_id,
    p.outcome, p.status, p.held, p.held_since, p.in_flight, p.attempts, p.deferrals,
    p.last_error, p.created_at, p.age, p.next_try_at
FROM birddog.pending p
ORDER BY p.created_at, p.key
LIMIT $1::int;

-- name: outbox_list_dead
-- The most recent dead letters, as the birddog.dead_letters view shows them.
-- params: $1 limit int
SELECT
    d.key, d.recipient_agent_id, d.recipient_session_id, d.in_reply_to, d.command_id,
    d.outcome, d.dead_reason, d.last_error, d.attempts, d.deferrals, d.created_at, d.dead_at
FROM birddog.dead_letters d
ORDER BY d.dead_at DESC NULLS LAST, d.key
LIMIT $1::int;

-- ---------------------------------------------------------------------------------------
-- wake
-- ---------------------------------------------------------------------------------------

-- name: wake_guard
-- A settlement about to arm a wake: wait while a drainer records that it goes to sleep.
-- params: none
-- The wake protocol (birddog/postgres/wake.py): settlements take the wake lock shared, a
-- drainer going to sleep takes it exclusive. The lock is 'birddog' in ASCII as a bigint.
-- This must be its own statement, before wake_schedule, so that wake_schedule's snapshot
-- is taken after the lock is granted.
SELECT pg_advisory_xact_lock_shared(27700487749136231);

-- name: wake_schedule
-- Arm a wake for $1 (null: none): when the armed wake (the time the last drainer to sleep looks again) is later, move it to $1 and NOTIFY birddog_wake; also delete the just-inserted rows $2 whose receipt committed while their insert waited.
-- params: $1 at timestamptz (null: arm nothing), $2 inserted_keys text[] (empty: none)
-- An armed wake at or before $1 means some drainer is awake or looks again by then, so
-- nothing is written and nobody is notified: a settlement does not serialise on the wake
-- row, nor on the commit of a notifying transaction. With no row yet (no drainer has
-- ever slept), the first wake is inserted and announced. The wake lock must be held
-- (wake_guard, or outbox_insert_rows earlier in the transaction). Deleting the rows
-- whose receipt won a race needs a snapshot taken after their insert: this statement's.
WITH gone AS (
    DELETE FROM birddog.outbox o
    USING birddog.receipts rc
    WHERE o.key = ANY($2::text[]) AND rc.key = o.key
    RETURNING o.key
), moved AS (
    UPDATE birddog.wake w
    SET wake_at = $1::timestamptz
    WHERE w.id
      AND $1::timestamptz IS NOT NULL
      AND (w.wake_at IS NULL OR w.wake_at > $1::timestamptz)
    RETURNING pg_notify('birddog_wake', '')
), inserted AS (
    INSERT INTO birddog.wake AS w (id, wake_at)
    SELECT true, $1::timestamptz
    WHERE $1::timestamptz IS NOT NULL AND NOT EXISTS (SELECT 1 FROM birddog.wake)
    ON CONFLICT (id) DO UPDATE SET wake_at = least(w.wake_at, excluded.wake_at)
    RETURNING pg_notify('birddog_wake', '')
)
SELECT g.key FROM gone g;

-- name: wake_sleep
-- A drainer goes to sleep until $1: wait for settlements arming a wake to commit, then record when it looks again (an armed wake between $2 and $1 comes first) and return it.
-- params: $1 until timestamptz, $2 now timestamptz
-- Run on its own (autocommit): the exclusive wake lock is held until this commits. The
-- drainer must then look for due rows once more before sleeping: every settlement that
-- committed before the lock was granted is visible to that look, and every later one
-- sees the time written here and notifies when it is earlier.
INSERT INTO birddog.wake AS w (id, wake_at)
SELECT true, $1::timestamptz
FROM (SELECT pg_advisory_xact_lock(27700487749136231)) AS locked
ON CONFLICT (id) DO UPDATE
SET wake_at = CASE
    WHEN w.wake_at > $2::timestamptz AND w.wake_at < excluded.wake_at THEN w.wake_at
    ELSE excluded.wake_at
END
RETURNING w.wake_at;

-- name: wake_get
-- The armed wake time, if any.
-- params: none
SELECT w.wake_at FROM birddog.wake w;

-- name: wake_clear
-- Disarm the wake if it is due by $1 (a later one stays armed).
-- params: $1 upto timestamptz
DELETE FROM birddog.wake w WHERE w.wake_at <= $1::timestamptz;

-- ---------------------------------------------------------------------------------------
-- routes
-- ---------------------------------------------------------------------------------------

-- name: routes_get
-- The route of one agent.
-- params: $1 agent_id text
SELECT
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts
FROM birddog.routes r
WHERE r.agent_id = $1::text;

-- name: routes_missing
-- Which of the agents $1 have no route (a reply to one would die unknown_recipient), in the order given.
-- params: $1 agent_ids text[]
SELECT a.agent_id
FROM unnest($1::text[]) WITH ORDINALITY AS a (agent_id, n)
WHERE NOT EXISTS (SELECT 1 FROM birddog.routes r WHERE r.agent_id = a.agent_id)
ORDER BY a.n;

-- name: routes_add
-- Add a route; nothing when the agent already has one.
-- params: $1 agent_id text, $2 url text (null for a mailbox), $3 secret text (null for a mailbox), $4 enabled boolean, $5 kind text, $6 batch_size int4, $7 now timestamptz, $8 post_timeout_s float8 (null: the default), $9 max_age_s float8 (null: the default), $10 max_attempts int4 (null: the default)
INSERT INTO birddog.routes AS r (
    agent_id, url, secret, enabled, kind, batch_size, held_at,
    post_timeout_s, max_age_s, max_attempts
)
VALUES (
    $1::text, $2::text, $3::text, $4::boolean, $5::text, $6::int4,
    CASE WHEN $4::boolean THEN NULL ELSE $7::timestamptz END,
    $8::float8, $9::float8, $10::int4
)
ON CONFLICT (agent_id) DO NOTHING
RETURNING
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts;

-- name: routes_update
-- Change a route's URL, secret and/or batch size (null keeps the current value), and set its policy columns as given (null: the daemon's default).
-- params: $1 agent_id text, $2 url text (null: keep), $3 secret text (null: keep), $4 batch_size int4 (null: keep), $5 post_timeout_s float8, $6 max_age_s float8, $7 max_attempts int4
UPDATE birddog.routes r
SET url = coalesce($2::text, r.url),
    secret = coalesce($3::text, r.secret),
    batch_size = coalesce($4::int4, r.batch_size),
    post_timeout_s = $5::float8,
    max_age_s = $6::float8,
    max_attempts = $7::int4,
    updated_at = now()
WHERE r.agent_id = $1::text
RETURNING
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts;

-- name: routes_rotate
-- A new current secret; the old one keeps signing, beside it, until $3.
-- params: $1 agent_id text, $2 secret text, $3 previous_until timestamptz
UPDATE birddog.routes r
SET previous_secret = r.secret,
    previous_secret_until = $3::timestamptz,
    secret = $2::text,
    updated_at = now()
WHERE r.agent_id = $1::text AND r.kind = 'http'
RETURNING
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts;

-- name: routes_forget_previous_secrets
-- Drop every rotated-out secret whose overlap ended by $1.
-- params: $1 now timestamptz
UPDATE birddog.routes r
SET previous_secret = NULL, previous_secret_until = NULL, updated_at = now()
WHERE r.previous_secret_until <= $1::timestamptz;

-- name: routes_lock
-- The route of one agent, locked until the transaction ends.
-- params: $1 agent_id text
SELECT
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts
FROM birddog.routes r
WHERE r.agent_id = $1::text
FOR UPDATE;

-- name: routes_set_enabled
-- Hold (false: since $3, unless already held) or release (true) an agent's route.
-- params: $1 agent_id text, $2 enabled boolean, $3 now timestamptz
UPDATE birddog.routes r
SET enabled = $2::boolean,
    held_at = CASE WHEN $2::boolean THEN NULL ELSE coalesce(r.held_at, $3::timestamptz) END,
    updated_at = now()
WHERE r.agent_id = $1::text
RETURNING
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts;

-- name: outbox_resume_aging
-- A released recipient's pending rows get back the age they had when the hold began ($2).
-- params: $1 recipient_agent_id text, $2 held_at timestamptz, $3 now timestamptz
-- A row written during the hold counts its age from the release.
UPDATE birddog.outbox o
SET created_at = o.created_at + ($3::timestamptz - greatest($2::timestamptz, o.created_at)),
    updated_at = now()
WHERE o.recipient_agent_id = $1::text
  AND o.state = 'pending'
  AND $3::timestamptz > greatest($2::timestamptz, o.created_at);

-- name: routes_remove
-- Delete an agent's route.
-- params: $1 agent_id text
DELETE FROM birddog.routes r WHERE r.agent_id = $1::text RETURNING r.agent_id;

-- name: routes_list
-- Every route, by agent id, without its secrets.
-- params: none
SELECT
    r.agent_id, r.url, r.enabled, r.kind, r.batch_size, r.held_at, r.previous_secret_until,
    r.post_timeout_s, r.max_age_s, r.max_attempts
FROM birddog.routes r
ORDER BY r.agent_id;

-- name: routes_summaries
-- Every route's agent id, kind and hold, by agent id; no URL, no secret.
-- params: none
SELECT r.agent_id, r.kind, r.enabled FROM birddog.routes r ORDER BY r.agent_id;

-- name: routes_summary
-- One agent's route: its agent id, kind and hold (no row: it has none); no URL, no secret.
-- params: $1 agent_id text
SELECT r.agent_id, r.kind, r.enabled FROM birddog.routes r WHERE r.agent_id = $1::text;

-- name: routes_secrets_lock
-- Every stored secret, locked until the transaction ends (re-sealing them).
-- params: none
SELECT r.agent_id, r.secret, r.previous_secret
FROM birddog.routes r
WHERE r.secret IS NOT NULL OR r.previous_secret IS NOT NULL
ORDER BY r.agent_id
FOR UPDATE;

-- name: routes_reseal
-- Store re-sealed secrets, one element of each array per route.
-- params: $1 agent_ids text[], $2 secrets text[], $3 previous_secrets text[]
UPDATE birddog.routes r
SET secret = u.secret, previous_secret = u.previous_secret, updated_at = now()
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(agent_id, secret, previous_secret)
WHERE r.agent_id = u.agent_id;

-- ---------------------------------------------------------------------------------------
-- mailbox: replies delivered into a table, read by the agents they are addressed to
-- ---------------------------------------------------------------------------------------
-- Reply JSON travels as text (::text out), so these work on any asyncpg pool, whatever
-- JSON codec it has.

-- name: mailbox_unread
-- An agent's (or one session's) unread replies, oldest delivery first, from $3 on, except keys $4.
-- params: $1 agent_id text, $2 session_id text (null: every session), $3 since timestamptz (null: from the start), $4 except_keys text[], $5 limit int
SELECT
    m.key, m.agent_id, m.session_id, m.in_reply_to, m.command_id, m.outcome,
    m.reply::text AS reply, m.delivered_at, m.read_at
FROM birddog.mailbox m
WHERE m.agent_id = $1::text
  AND ($2::text IS NULL OR m.session_id = $2::text)
  AND m.read_at IS NULL
  AND ($3::timestamptz IS NULL OR m.delivered_at >= $3::timestamptz)
  AND NOT (m.key = ANY($4::text[]))
ORDER BY m.delivered_at, m.key
LIMIT $5::int;

-- name: mailbox_answers
-- Every reply (read or not) to the mails $1, by mail key then reply key: one look for many waiters.
-- params: $1 in_reply_to text[]
SELECT
    m.key, m.agent_id, m.session_id, m.in_reply_to, m.command_id, m.outcome,
    m.reply::text AS reply, m.delivered_at, m.read_at
FROM birddog.mailbox m
WHERE m.in_reply_to = ANY($1::text[])
ORDER BY m.in_reply_to, m.key;

-- name: mailbox_owned
-- The replies among keys $1 (read or not) in the mailbox of agent $2, session $3.
-- params: $1 keys text[], $2 agent_id text, $3 session_id text
SELECT
    m.key, m.agent_id, m.session_id, m.in_reply_to, m.command_id, m.outcome,
    m.reply::text AS reply, m.delivered_at, m.read_at
FROM birddog.mailbox m
WHERE m.key = ANY($1::text[]) AND m.agent_id = $2::text AND m.session_id = $3::text
ORDER BY m.key;

-- name: mailbox_latest
-- The latest replies (read or not) in the mailbox of agent $1, session $2, newest first.
-- params: $1 agent_id text, $2 session_id text, $3 limit int
SELECT
    m.key, m.agent_id, m.session_id, m.in_reply_to, m.command_id, m.outcome,
    m.reply::text AS reply, m.delivered_at, m.read_at
FROM birddog.mailbox m
WHERE m.agent_id = $1::text AND m.session_id = $2::text
ORDER BY m.delivered_at DESC, m.key DESC
LIMIT $3::int;

-- name: mailbox_unread_count
-- How many unread replies the mailbox of agent $1, session $2 holds.
-- params: $1 agent_id text, $2 session_id text
SELECT count(*) FROM birddog.mailbox m
WHERE m.agent_id = $1::text AND m.session_id = $2::text AND m.read_at IS NULL;

-- name: mailbox_ack
-- Mark replies read at $2 (birddog.ack); returns the keys that were unread.
-- params: $1 keys text[], $2 read_at timestamptz
SELECT a.key FROM birddog.ack($1::text[], $2::timestamptz) AS a;

-- ---------------------------------------------------------------------------------------
-- ask: a mail whose reply the asker waits for in its mailbox
-- ---------------------------------------------------------------------------------------

-- name: ask_send
-- A checked send in one statement (birddog.send_mail): the key locked, the sender's route kind, the target known, a job stored under the key (its payload), else the job enqueued; which check ended it.
-- params: $1 key text, $2 mailbox_agent text (null: no mailbox wanted), $3 require_mailbox boolean, $4 mailbox_is_sender boolean, $5 to_agent text, $6 to_session text, $7 job_id text, $8 queue text, $9 lane text, $10 priority int2, $11 payload text (JSON), $12 recovery text (JSON, null: none), $13 created_at timestamptz (null: clock_timestamp()), $14 traceparent text (null: not traced), $15 not_before timestamptz (null: at once), $16 expires_in_s float8 (null: never on its own)
SELECT s.outcome, s.route_kind, s.stored_payload, s.inserted, s.differing, s.mailbox_added
FROM birddog.send_mail(
    $1::text, $2::text, $3::boolean, $4::boolean, $5::text, $6::text, $7::text, $8::text,
    $9::text, $10::int2, $11::text, $12::text, $13::timestamptz, $14::text, $15::timestamptz,
    $16::float8
) AS s;

-- name: server_identity
-- Which server and database this connection writes to: the cluster's system identifier and the database's oid (what a spooled mail records, so it is forwarded only there).
-- params: none
SELECT (SELECT c.system_identifier FROM pg_catalog.pg_control_system() AS c)::text
    || '/' || (SELECT d.oid FROM pg_catalog.pg_database AS d
               WHERE d.datname = pg_catalog.current_database())::text;

-- name: session_known
-- Whether an agent session can be sent work (birddog.session_known: it has a route, or its session was sent work before), read before an unchecked send that must not reach an unknown agent.
-- params: $1 agent_id text, $2 session_id text
SELECT birddog.session_known($1::text, $2::text);

-- name: routes_ensure_mailbox
-- Give an agent without a route a mailbox route (birddog.ensure_mailbox: an operator, or the agent's own login); whether one was added.
-- params: $1 agent_id text
SELECT birddog.ensure_mailbox($1::text);

-- name: ask_facts
-- Where the ask with mail key $1 stands for its asker $2:$3: its job (as the caller may see it), the workers and daemons that beat within $4 seconds and the reply's outbox row (birddog.ask_standing), its mailbox row; one row.
-- params: $1 key text, $2 asker_agent_id text, $3 asker_session_id text, $4 within_s float8
SELECT
    now() AS now,
    j.state AS job_state, j.queue, j.created_at AS job_created_at, j.started_at, j.outcome,
    s.workers_recent, s.daemons_recent, s.reply_key, s.reply_state, s.reply_attempts,
    s.reply_due_at, s.last_error, s.dead_reason,
    coalesce(NOT r.enabled, false) AS route_held,
    m.delivered_at
FROM birddog.ask_standing($1::text, $2::text, $3::text, $4::float8) s
LEFT JOIN LATERAL (
    SELECT j.state, j.queue, j.created_at, j.started_at, j.outcome
    FROM birddog.jobs j
    WHERE (j.payload #>> '{mail,key}') = $1::text
    ORDER BY j.created_at, j.job_id
    LIMIT 1
) j ON true
LEFT JOIN LATERAL (
    SELECT m.delivered_at
    FROM birddog.mailbox m
    WHERE m.in_reply_to = $1::text AND m.agent_id = $2::text AND m.session_id = $3::text
    ORDER BY m.delivered_at
    LIMIT 1
) m ON true
LEFT JOIN birddog.routes r ON r.agent_id = $2::text;

-- name: ask_job_by_mail_key
-- The job that carries the mail with key $1, its payload as text (jobs_mail_key_idx).
-- params: $1 key text
SELECT j.job_id, j.payload::text AS payload
FROM birddog.jobs j
WHERE (j.payload #>> '{mail,key}') = $1::text
ORDER BY j.created_at, j.job_id
LIMIT 1;

-- name: schema_version
-- The schema's Alembic revision (no row, or no table: never migrated).
-- params: none
SELECT v.version_num FROM birddog.alembic_version v;

-- name: a2a_task
-- One ask job as an A2A task: its state, outcome, result and diagnostic, and its mail (addresses, key, content).
-- params: $1 job_id text
SELECT
    j.job_id, j.queue, j.state, j.outcome, j.result_content, j.diagnostic,
    j.cancel_requested_at, (j.payload -> 'mail')::text AS mail, j.created_at, j.updated_at
FROM birddog.jobs j
WHERE j.job_id = $1::text;

-- name: a2a_tasks_of_context
-- The ask jobs of one context (queue $1) sent to agent $2 by agent $3, oldest first, after job $4 (NULL: from the start), at most $5.
-- params: $1 queue text, $2 agent_id text, $3 from_agent_id text, $4 after_job_id text, $5 limit int
SELECT
    j.job_id, j.queue, j.state, j.outcome, j.result_content, j.diagnostic,
    j.cancel_requested_at, (j.payload -> 'mail')::text AS mail, j.created_at, j.updated_at
FROM birddog.jobs j
WHERE j.queue = $1::text
  AND (j.payload #>> '{mail,to,agentId}') = $2::text
  AND (j.payload #>> '{mail,from,agentId}') = $3::text
  AND ($4::text IS NULL OR j.job_id COLLATE "C" > $4::text)
ORDER BY j.job_id COLLATE "C"
LIMIT $5::int;

-- name: a2a_reply_to_add
-- Add reply address $2 to the stored mail of job $1, sent by agent $3, unless it is settled (a push config set later): added, present, settled, missing or not_caller.
-- params: $1 job_id text, $2 address jsonb, $3 caller_agent text
SELECT birddog.a2a_reply_to_add($1::text, $2::jsonb, $3::text) AS result;

-- name: a2a_reply_to_remove
-- Remove reply address $2 from the stored mail of job $1, sent by agent $3, unless it is settled (a push config deleted): removed, absent, settled, missing or not_caller.
-- params: $1 job_id text, $2 address jsonb, $3 caller_agent text
SELECT birddog.a2a_reply_to_remove($1::text, $2::jsonb, $3::text) AS result;

-- name: a2a_push_route
-- The route of A2A push config agent $1 (kind a2a only, its URL and sealed secret) through birddog.a2a_push_route; no row for any other route.
-- params: $1 agent_id text
SELECT
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts
FROM birddog.a2a_push_route($1::text) AS r;

-- name: a2a_push_route_add
-- Store A2A push config agent $1's route (kind a2a, URL $2, sealed secret $3) through birddog.a2a_push_route_add; no row when it has one.
-- params: $1 agent_id text, $2 url text, $3 secret text (sealed)
SELECT
    r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
    r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s, r.max_attempts
FROM birddog.a2a_push_route_add($1::text, $2::text, $3::text) AS r;

-- name: a2a_cancel
-- Cancel job $1 for A2A caller agent $2 (birddog.a2a_cancel: its mail must be from $2): the decision (missing: not the caller's), the outcome and the keys written.
-- params: $1 job_id text, $2 caller_agent text, $3 content text, $4 max_content_bytes int, $5 wake boolean
SELECT c.decision, c.outcome, c.keys, c.unreadable
FROM birddog.a2a_cancel($1::text, $2::text, $3::text, $4::int, $5::boolean) AS c;

-- ---------------------------------------------------------------------------------------
-- agents: per-agent identity (birddog agent ...); a token is stored as its SHA-256 only
-- ---------------------------------------------------------------------------------------

-- name: agents_add
-- Record an agent; nothing when it exists (then no row comes back).
-- params: $1 agent_id text
INSERT INTO birddog.agents AS a (agent_id)
VALUES ($1::text)
ON CONFLICT (agent_id) DO NOTHING
RETURNING a.agent_id, a.created_at;

-- name: agents_token_insert
-- Store a new token of an existing agent by its digest; no row when the agent was never added.
-- params: $1 token_id text, $2 agent_id text, $3 session_id text, $4 token_digest bytea
INSERT INTO birddog.agent_tokens AS t (token_id, agent_id, session_id, token_digest)
SELECT $1::text, a.agent_id, $3::text, $4::bytea
FROM birddog.agents a
WHERE a.agent_id = $2::text
RETURNING t.token_id, t.created_at;

-- name: agents_token_use
-- The agent session a token digest names (no row: unknown or revoked), recording its use.
-- params: $1 token_digest bytea
SELECT u.token_id, u.agent_id, u.session_id FROM birddog.agent_token_use($1::bytea) AS u;

-- name: agents_revoke
-- Delete an agent's tokens (every one, or the one with id $2); returns the ids deleted.
-- params: $1 agent_id text, $2 token_id text (null: every token of the agent)
DELETE FROM birddog.agent_tokens t
WHERE t.agent_id = $1::text AND ($2::text IS NULL OR t.token_id = $2::text)
RETURNING t.token_id;

-- name: agents_exists
-- Whether an agent was added.
-- params: $1 agent_id text
SELECT EXISTS (SELECT 1 FROM birddog.agents a WHERE a.agent_id = $1::text);

-- name: agents_list
-- Every agent with its database login (if any) and its tokens' ids, sessions, creation and last use (never a digest), by agent id.
-- params: none
SELECT
    a.agent_id, a.created_at, l.login, t.token_id, t.session_id,
    t.created_at AS token_created_at, t.last_used_at
FROM birddog.agents a
LEFT JOIN birddog.agent_logins l ON l.agent_id = a.agent_id
LEFT JOIN birddog.agent_tokens t ON t.agent_id = a.agent_id
ORDER BY a.agent_id, t.created_at, t.token_id;

-- name: agents_create_login
-- Make a database login for an agent, a member of birddog_agent (needs CREATEROLE: the caller's rights); returns its name.
-- params: $1 agent_id text, $2 password text
SELECT birddog.create_agent_login($1::text, $2::text);

-- name: agents_drop_login
-- Forget and drop an agent's database login; returns it (null: it had none).
-- params: $1 agent_id text
SELECT birddog.drop_agent_login($1::text);

-- ===== daemons =====

-- name: daemons_beat
-- Record that this process ($1, a drain or a worker) is alive through birddog.daemons_beat (its own row only; false: the id is another login's), and forget processes long gone.
-- params: $1 daemon_id text, $2 kind text, $3 host text, $4 pid int4
SELECT birddog.daemons_beat($1::text, $2::text, $3::text, $4::int4);

-- name: daemons_stop
-- Mark this process's row stopped on a clean stop (birddog.daemons_stop: its own row only); whether it was running.
-- params: $1 daemon_id text
SELECT birddog.daemons_stop($1::text);

-- name: daemons_seen
-- Daemons and workers running (not stopped) that beat within an interval, newest first.
-- params: $1 within_s float8
SELECT daemon_id, kind, host, pid, started_at, seen_at
FROM birddog.daemons
WHERE seen_at > now() - make_interval(secs => $1) AND stopped_at IS NULL
ORDER BY seen_at DESC;

-- name: check_stale_pending
-- Pending, unheld replies older than a limit, oldest first (for `birddog check`).
-- params: $1 older_than_s float8, $2 limit int4
SELECT key, recipient_agent_id, created_at, attempts, last_error
FROM birddog.pending
WHERE NOT held AND created_at < now() - make_interval(secs => $1)
ORDER BY created_at
LIMIT $2;

-- name: check_new_dead
-- Dead letters that died within an interval, newest first (for `birddog check`).
-- params: $1 within_s float8, $2 limit int4
SELECT key, recipient_agent_id, dead_reason, dead_at
FROM birddog.dead_letters
WHERE dead_at > now() - make_interval(secs => $1)
ORDER BY dead_at DESC
LIMIT $2;

-- name: check_stale_queued
-- Interactive jobs (tasks, escalations) queued longer than a limit (nobody claimed them), and informational mail (reports, receipts) still queued that long past its digest time, the longest waiting first (for `birddog check`); informational mail waiting for its digest is not counted.
-- params: $1 older_than_s float8, $2 limit int4
SELECT job_id, queue, priority, created_at, kind, digest_at
FROM birddog.jobs
WHERE state = 'queued'
  AND ((kind IN ('task', 'escalation') AND created_at < now() - make_interval(secs => $1))
       OR digest_at < now() - make_interval(secs => $1))
ORDER BY coalesce(digest_at, created_at), job_id
LIMIT $2;

-- name: check_overdue_running
-- Running jobs whose lease ended more than a grace ago: their worker is gone and no reaper gave them back (for `birddog check`).
-- params: $1 grace_s float8, $2 limit int4
SELECT job_id, queue, worker_id, lease_expires_at
FROM birddog.jobs
WHERE state = 'running' AND lease_expires_at < now() - make_interval(secs => $1)
ORDER BY lease_expires_at, job_id
LIMIT $2;

-- name: check_held_queues
-- Running jobs holding a queue for too long while other jobs wait in it (started more than birddog.limits.max_hold_s ago), or with a lease beyond max_lease_s from now, longest first (for `birddog check`).
-- params: $1 limit int4
SELECT
    j.job_id, j.queue, j.worker_id, j.started_at, j.lease_expires_at,
    (SELECT count(*) FROM birddog.jobs w
     WHERE w.queue_key = j.queue_key AND w.state = 'queued')::int AS waiting
FROM birddog.jobs j
CROSS JOIN (
    SELECT
        make_interval(secs => coalesce((SELECT l.max_hold_s FROM birddog.limits l), 3600)) AS hold,
        make_interval(secs => coalesce((SELECT l.max_lease_s FROM birddog.limits l), 3600)) AS lease
) m
WHERE j.state = 'running'
  AND (
      j.lease_expires_at > now() + m.lease + interval '1 minute'
      OR (j.started_at < now() - m.hold AND EXISTS (
          SELECT 1 FROM birddog.jobs w WHERE w.queue_key = j.queue_key AND w.state = 'queued'
      ))
  )
ORDER BY j.started_at, j.job_id
LIMIT $1;

-- name: check_long_holds
-- Recipients held longer than a limit, longest first, with the replies waiting on each (for `birddog check`).
-- params: $1 older_than_s float8, $2 limit int4
SELECT
    r.agent_id,
    r.held_at,
    (SELECT count(*) FROM birddog.outbox o
     WHERE o.recipient_agent_id = r.agent_id AND o.state = 'pending')::int AS waiting
FROM birddog.routes r
WHERE NOT r.enabled AND r.held_at < now() - make_interval(secs => $1)
ORDER BY r.held_at, r.agent_id
LIMIT $2;

-- name: check_due_without_daemon
-- Replies due (up to $2 counted) while no running drain daemon beat within $1 seconds, and when the last one beat and whether it stopped cleanly; no row when a daemon beat in time or nothing is due (for `birddog check`).
-- params: $1 within_s float8, $2 count_limit int4
SELECT
    count(*)::int AS due,
    min(d.due_at) AS oldest_due_at,
    (SELECT max(b.seen_at) FROM birddog.daemons b WHERE b.kind = 'drain') AS last_seen_at,
    (
        SELECT b.stopped_at FROM birddog.daemons b
        WHERE b.kind = 'drain'
        ORDER BY b.seen_at DESC
        LIMIT 1
    ) AS last_stopped_at
FROM (
    SELECT o.due_at
    FROM birddog.outbox o
    LEFT JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id
    WHERE o.state = 'pending' AND o.due_at <= now() AND coalesce(r.enabled, true)
    LIMIT $2
) d
WHERE NOT EXISTS (
    SELECT 1 FROM birddog.daemons b
    WHERE b.kind = 'drain' AND b.stopped_at IS NULL
      AND b.seen_at > now() - make_interval(secs => $1)
)
HAVING count(*) > 0;

-- ===== the operator's console and CLI (postgres/admin.py) =====
-- Read-only pages: one statement per page, keyset paging (the cursor is the last row's
-- sort key), never a statement per row. No statement here reads a route's secret.

-- name: admin_activity
-- Deliveries (receipts) and dead letters per minute over the $2 minutes up to $1, oldest minute first.
-- params: $1 now timestamptz, $2 minutes int
WITH bounds AS (
    SELECT date_trunc('minute', $1::timestamptz) - make_interval(mins => $2::int - 1) AS since
), minutes AS (
    SELECT generate_series(
        b.since, b.since + make_interval(mins => $2::int - 1), interval '1 minute'
    ) AS minute
    FROM bounds b
), delivered AS (
    SELECT date_trunc('minute', rc.delivered_at) AS minute, count(*)::int AS n
    FROM birddog.receipts rc, bounds b
    WHERE rc.delivered_at >= b.since
    GROUP BY 1
), died AS (
    SELECT date_trunc('minute', o.dead_at) AS minute, count(*)::int AS n
    FROM birddog.outbox o, bounds b
    WHERE o.state = 'dead' AND o.dead_at >= b.since
    GROUP BY 1
)
SELECT m.minute, coalesce(d.n, 0) AS delivered, coalesce(x.n, 0) AS dead
FROM minutes m
LEFT JOIN delivered d ON d.minute = m.minute
LEFT JOIN died x ON x.minute = m.minute
ORDER BY m.minute;

-- name: admin_pending_page
-- Pending replies in next-try order after the cursor ($3, $4), of one recipient and one status when given.
-- params: $1 recipient_agent_id text (null: all), $2 status text (null: all), $3 after_next_try_at timestamptz (null: from the start), $4 after_key text, $5 limit int
SELECT
    p.key, p.recipient_agent_id, p.recipient_session_id, p.in_reply_to, p.command_id,
    p.outcome, p.status, p.held, p.held_since, p.in_flight, p.attempts, p.deferrals,
    p.last_error, p.created_at, p.age, p.next_try_at
FROM birddog.pending p
WHERE ($1::text IS NULL OR p.recipient_agent_id = $1::text)
  AND ($2::text IS NULL OR p.status = $2::text)
  AND ($3::timestamptz IS NULL OR (p.next_try_at, p.key) > ($3::timestamptz, $4::text))
ORDER BY p.next_try_at, p.key
LIMIT $5::int;

-- name: admin_dead_page
-- Dead letters, newest death first, after the cursor ($2, $3), of one recipient when given.
-- params: $1 recipient_agent_id text (null: all), $2 after_dead_at timestamptz (null: from the start), $3 after_key text, $4 limit int
SELECT
    d.key, d.recipient_agent_id, d.recipient_session_id, d.in_reply_to, d.command_id,
    d.outcome, d.dead_reason, d.last_error, d.attempts, d.deferrals, d.created_at,
    d.dead_at, d.attempt_log
FROM birddog.dead_letters d
WHERE ($1::text IS NULL OR d.recipient_agent_id = $1::text)
  AND ($2::timestamptz IS NULL OR (d.dead_at, d.key) < ($2::timestamptz, $3::text))
ORDER BY d.dead_at DESC, d.key DESC
LIMIT $4::int;

-- name: admin_routes_page
-- Routes by agent id after $1, with their pending and dead counts; never a secret.
-- params: $1 after_agent_id text (null: from the start), $2 limit int
SELECT
    r.agent_id, r.kind, r.url, r.enabled, r.held_at, r.batch_size, r.post_timeout_s,
    r.max_age_s, r.max_attempts, r.created_at, r.updated_at, c.pending, c.dead
FROM birddog.routes r
LEFT JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE o.state = 'pending')::int AS pending,
        count(*) FILTER (WHERE o.state = 'dead')::int AS dead
    FROM birddog.outbox o
    WHERE o.recipient_agent_id = r.agent_id
) c ON true
WHERE ($1::text IS NULL OR r.agent_id > $1::text)
ORDER BY r.agent_id
LIMIT $2::int;

-- name: admin_jobs_page
-- Jobs: running (longest first), queued (oldest first), settled (newest first), of one state and queue when given, after the cursor ($3, $4, $5).
-- params: $1 state text (null: every state), $2 queue text (null: every queue), $3 after_rank int (0 running, 1 queued, 2 settled; null: from the start), $4 after_at timestamptz, $5 after_job_id text, $6 limit int
-- Each state reads its own index in its own order and stops at the page; the cursor is
-- the last row's (rank, time, job id).
WITH running AS (
    SELECT 0 AS rank, coalesce(j.started_at, j.created_at) AS at, j.job_id,
           row_number() OVER (ORDER BY coalesce(j.started_at, j.created_at), j.job_id) AS n
    FROM birddog.jobs j
    WHERE j.state = 'running'
      AND ($1::text IS NULL OR $1::text = 'running')
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::int IS NULL OR $3::int < 0 OR ($3::int = 0
           AND (coalesce(j.started_at, j.created_at), j.job_id) > ($4::timestamptz, $5::text)))
    ORDER BY coalesce(j.started_at, j.created_at), j.job_id
    LIMIT $6::int
), queued AS (
    SELECT 1 AS rank, j.created_at AS at, j.job_id,
           row_number() OVER (ORDER BY j.created_at, j.job_id) AS n
    FROM birddog.jobs j
    WHERE j.state = 'queued'
      AND ($1::text IS NULL OR $1::text = 'queued')
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::int IS NULL OR $3::int < 1 OR ($3::int = 1
           AND (j.created_at, j.job_id) > ($4::timestamptz, $5::text)))
    ORDER BY j.created_at, j.job_id
    LIMIT $6::int
), settled AS (
    SELECT 2 AS rank, j.settled_at AS at, j.job_id,
           row_number() OVER (ORDER BY j.settled_at DESC, j.job_id DESC) AS n
    FROM birddog.jobs j
    WHERE j.state = 'settled'
      AND ($1::text IS NULL OR $1::text = 'settled')
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::int IS NULL OR $3::int < 2 OR ($3::int = 2
           AND (j.settled_at, j.job_id) < ($4::timestamptz, $5::text)))
    ORDER BY j.settled_at DESC, j.job_id DESC
    LIMIT $6::int
), page AS (
    SELECT * FROM running
    UNION ALL SELECT * FROM queued
    UNION ALL SELECT * FROM settled
    ORDER BY rank, n
    LIMIT $6::int
)
SELECT
    p.rank, p.at, j.job_id, j.queue, j.lane, j.priority, j.state, j.kind, j.outcome, j.created_at,
    j.started_at, j.settled_at, j.lease_expires_at, j.recovery_count, j.agent_id,
    j.not_before, j.expires_at, j.digest_at,
    j.cancel_requested_at, j.worker_id, j.diagnostic,
    j.payload #>> '{mail,key}' AS mail_key,
    j.payload #>> '{mail,from,agentId}' AS sender_agent_id
FROM page p
JOIN birddog.jobs j ON j.job_id = p.job_id
ORDER BY p.rank, p.n;

-- name: admin_story_jobs
-- The jobs a story names: by job id $1 or by the key of the mail they carry; the mail without its content, which comes as a preview.
-- params: $1 job_id text, $2 mail_keys text[], $3 preview_chars int, $4 limit int
SELECT
    j.job_id, j.queue, j.lane, j.priority, j.state, j.kind, j.outcome, j.created_at,
    j.started_at, j.settled_at, j.updated_at, j.lease_expires_at, j.recovery_count, j.recovery,
    j.cancel_requested_at, j.cancel_content, j.worker_id, j.slot, j.diagnostic,
    j.agent_id, j.not_before, j.expires_at, j.digest_at,
    left(j.result_content, $3::int) AS result_preview,
    length(j.result_content) AS result_chars,
    j.payload #>> '{mail,key}' AS mail_key,
    (j.payload -> 'mail') #- '{content}' AS mail,
    left(j.payload #>> '{mail,content}', $3::int) AS content_preview,
    length(j.payload #>> '{mail,content}') AS content_chars,
    j.payload ->> 'commandFactId' AS command_fact_id
FROM birddog.jobs j
WHERE j.job_id = $1::text OR (j.payload #>> '{mail,key}') = ANY($2::text[])
ORDER BY j.created_at, j.job_id
LIMIT $4::int;

-- name: admin_story_replies
-- The pending and dead replies to mails $1 (reply keys 'outbox:<mail key>:reply:<n>'), with their attempt logs.
-- params: $1 mail_keys text[], $2 limit int
-- The key range reads the primary key; in_reply_to keeps a mail key that merely starts
-- like another one out.
SELECT
    o.key, o.in_reply_to, o.recipient_agent_id, o.recipient_session_id, o.command_id,
    o.outcome, o.state, o.attempts, o.deferrals, o.due_at, o.created_at, o.last_error,
    o.dead_reason, o.dead_at, o.lease_expires_at, o.attempt_log
FROM unnest($1::text[]) AS m(mail_key)
JOIN birddog.outbox o
  ON o.key >= ('outbox:' || m.mail_key || ':reply:') COLLATE "C"
 AND o.key < ('outbox:' || m.mail_key || ':reply;') COLLATE "C"
 AND o.in_reply_to = m.mail_key
ORDER BY o.key
LIMIT $2::int;

-- name: admin_story_receipts
-- The receipts of replies to mails $1, with their attempt logs.
-- params: $1 mail_keys text[], $2 limit int
-- Receipts keep no in_reply_to: the rest of the key after the prefix must be the index.
SELECT
    m.mail_key AS in_reply_to, rc.key, rc.delivered_at, rc.attempts,
    rc.recipient_agent_id, rc.recipient_session_id, rc.command_id, rc.outcome,
    rc.attempt_log
FROM unnest($1::text[]) AS m(mail_key)
JOIN birddog.receipts rc
  ON rc.key >= ('outbox:' || m.mail_key || ':reply:') COLLATE "C"
 AND rc.key < ('outbox:' || m.mail_key || ':reply;') COLLATE "C"
WHERE substr(rc.key, length('outbox:' || m.mail_key || ':reply:') + 1) ~ '^(0|[1-9][0-9]*)$'
ORDER BY rc.key
LIMIT $2::int;

-- name: admin_story_mailbox
-- The mailbox rows of replies to mails $1 (delivered to agents that pull their replies).
-- params: $1 mail_keys text[], $2 limit int
SELECT
    mb.key, mb.agent_id, mb.session_id, mb.in_reply_to, mb.command_id, mb.outcome,
    mb.delivered_at, mb.read_at
FROM birddog.mailbox mb
WHERE mb.in_reply_to = ANY($1::text[])
ORDER BY mb.key
LIMIT $2::int;

-- ===== jobs =====
-- The job store (birddog/postgres/jobs.py). JSON travels as text ($n::text::jsonb in,
-- ::text out), so these statements work the same on a BirdDog pool connection (JSON
-- codec) and on a caller's asyncpg or SQLAlchemy connection (no codec, or another one).
-- Times that drive claims (lease, settlement) come from the store's clock as parameters.

-- name: jobs_enqueue
-- Enqueue a queued job through birddog.enqueue: inserted (and announced at commit), or a replay with the fields that differ (null: the stored job is not visible); a mailbox route for the mail's sender when $9 asks.
-- params: $1 job_id text, $2 queue text, $3 lane text, $4 priority int2, $5 payload text (JSON), $6 recovery text (JSON, null: none), $7 created_at timestamptz (null: clock_timestamp()), $8 traceparent text (W3C, null: not traced), $9 sender_mailbox boolean, $10 not_before timestamptz (null: at once), $11 expires_in_s float8 (null: never on its own)
SELECT e.inserted, e.differing, e.mailbox_added
FROM birddog.enqueue(
    $1::text, $2::text, $3::text, $4::int2, $5::text, $6::text, $7::timestamptz, $8::text,
    $9::boolean, $10::timestamptz, $11::float8
) AS e;

-- name: jobs_get
-- One job, its JSON as text (never its claim token: an agent's login may not read it).
-- params: $1 job_id text
SELECT
    j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text AS payload,
    j.recovery::text AS recovery, j.outcome, j.lease_expires_at, j.recovery_count,
    j.cancel_requested_at, j.cancel_content, j.created_at, j.not_before, j.expires_at
FROM birddog.jobs j
WHERE j.job_id = $1::text;

-- name: jobs_claim
-- Claim up to $2 jobs through birddog.claim, at most one per queue: the head of each queue (priority, then age, then id) that may be claimed at $6 (not before its not-before, not after its expiry) and whose running jobs hold fewer than $5 slots; running in the lowest free slot, a fresh claim token, a lease.
-- params: $1 queues text[] (null: with $8 null, every queue not starting with $7), $2 limit int, $3 lease_until timestamptz, $4 worker_id text (null: none), $5 slots per queue int, $6 started_at timestamptz (the claim's now), $7 reserved queue prefix text, $8 agents text[] (the sessions of these agents as well; null: none), $9 batch int (a head takes up to $9 - 1 jobs of its queue behind it, as one turn)
-- The function reads the queue heads (birddog.queue_heads) and probes only the candidate
-- queues' jobs; see migrations/versions/0011_jobs_model.py.
SELECT
    c.job_id, c.queue, c.lane, c.priority, c.state, c.payload, c.recovery, c.outcome,
    c.claim_token, c.lease_expires_at, c.recovery_count, c.cancel_requested_at,
    c.cancel_content, c.created_at, c.traceparent, c.not_before, c.expires_at
FROM birddog.claim(
    $1::text[], $2::int, $3::timestamptz, $4::text, $5::int, $6::timestamptz, $7::text,
    $8::text[], $9::int
) AS c;

-- name: jobs_queue_heads_repair
-- Recompute the queue heads that differ from the jobs (birddog.queue_heads_repair); how many queues were repaired.
-- params: none
SELECT birddog.queue_heads_repair();

-- name: jobs_heartbeat
-- Extend the lease of a job still running under claim $2 (birddog.heartbeat); whether a cancellation was requested, null when the claim holds nothing.
-- params: $1 job_id text, $2 claim_token uuid, $3 lease_until timestamptz
SELECT birddog.heartbeat($1::text, $2::uuid, $3::timestamptz);

-- name: jobs_record_turn
-- Record where the turn of a job still running under claim $2 runs: its supervisor's host, boot, pid and start time; returns the job id (none: the claim is gone).
-- params: $1 job_id text, $2 claim_token uuid, $3 host text, $4 boot_id text, $5 pid int, $6 start_ticks bigint
SELECT birddog.record_turn($1::text, $2::uuid, $3::text, $4::text, $5::int, $6::bigint);

-- name: jobs_turns_on_host
-- The recorded turns of running jobs on host $1 in its boot $2 (a worker starting there ends those whose worker is gone).
-- params: $1 host text, $2 boot_id text
SELECT j.job_id, j.turn_host, j.turn_boot_id, j.turn_pid, j.turn_start_ticks
FROM birddog.jobs j
WHERE j.state = 'running' AND j.turn_host = $1::text AND j.turn_boot_id = $2::text
  AND j.turn_pid IS NOT NULL AND j.turn_start_ticks IS NOT NULL
ORDER BY j.job_id;

-- name: jobs_settle
-- Finish a job under claim $2 in one call (birddog.settle): the decision, the stored outcome and diagnostic, the reply keys written, and why it was refused.
-- params: $1 job_id text, $2 claim_token uuid (null: none), $3 event text ('result' or 'stop'), $4 outcome text (result: as reported, or failed when unstorable), $5 content text, $6 diagnostic text (bounded), $7 reply_diagnostic text (bounded again, as a reply carries it), $8 cancel_diagnostic text (a recorded cancellation's), $9 now timestamptz, $10 max_content_bytes int, $11 traceparent text, $12 wake boolean
SELECT
    s.decision, s.outcome, s.cause, s.diagnostic, s.content, s.keys, s.unreadable, s.reason
FROM birddog.settle(
    $1::text, $2::uuid, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text,
    $9::timestamptz, $10::int, $11::text, $12::boolean
) AS s;

-- name: jobs_cancel
-- Cancel a job (birddog.cancel): a queued one settles cancelled with its replies, a running one records it for its worker; the decision, the outcome and the keys written.
-- params: $1 job_id text, $2 content text, $3 now timestamptz, $4 max_content_bytes int, $5 wake boolean
SELECT c.decision, c.outcome, c.keys, c.unreadable
FROM birddog.cancel($1::text, $2::text, $3::timestamptz, $4::int, $5::boolean) AS c;

-- name: jobs_reap
-- Carry out a reaper event for jobs $2 (birddog.reap): what became of each job it locked (requeued, an outcome, or keep).
-- params: $1 event text ('lease_expired' or 'queued_too_long'), $2 job_ids text[], $3 recovery_counts int4[], $4 bounce contents text[], $5 bounce diagnostics text[], $6 now timestamptz (the settlement time), $7 since timestamptz (lease ended by, or enqueued by for a bounce), $8 lease diagnostic text, $9 lease reply diagnostic text, $10 max_content_bytes int, $11 wake boolean
SELECT r.job_id, r.what, r.unreadable
FROM birddog.reap(
    $1::text, $2::text[], $3::int4[], $4::text[], $5::text[], $6::timestamptz, $7::timestamptz,
    $8::text, $9::text, $10::int, $11::boolean
) AS r;

-- name: jobs_expired
-- Up to $2 running jobs whose lease ended by $1, oldest lease first, except jobs $3 (for birddog.reap, which locks them).
-- params: $1 now timestamptz, $2 limit int, $3 skip text[] (jobs refused or held elsewhere this pass)
SELECT j.job_id, j.recovery_count
FROM birddog.jobs j
WHERE j.state = 'running' AND j.lease_expires_at <= $1::timestamptz
  AND NOT (j.job_id = ANY($3::text[]))
ORDER BY j.lease_expires_at, j.job_id
LIMIT $2::int;

-- name: jobs_queued_too_long
-- Up to $2 queued jobs enqueued by $1 (the maximum queued age ago; an informational job's digest due by then too) or past their own expiry at $4, oldest first, except jobs $3 (for birddog.reap, which locks them).
-- params: $1 enqueued_by timestamptz, $2 limit int, $3 skip text[] (jobs refused or held elsewhere this pass), $4 now timestamptz
SELECT j.job_id, j.recovery_count, j.created_at, j.expires_at, j.digest_at
FROM birddog.jobs j
WHERE j.state = 'queued'
  AND ((j.created_at <= $1::timestamptz
        AND (j.digest_at IS NULL OR j.digest_at <= $1::timestamptz))
       OR j.expires_at <= $4::timestamptz)
  AND NOT (j.job_id = ANY($3::text[]))
ORDER BY j.created_at, j.job_id
LIMIT $2::int;

-- name: jobs_counts
-- How many jobs are in each state.
-- params: none
SELECT j.state, count(*)::int AS jobs FROM birddog.jobs j GROUP BY j.state;

-- name: jobs_not_yet_due
-- How many queued jobs may not be claimed before a later time than $1 (send --not-before), and the earliest such time.
-- params: $1 now timestamptz
SELECT count(*)::int AS jobs, min(j.not_before) AS next_at
FROM birddog.jobs j
WHERE j.state = 'queued' AND j.not_before > $1::timestamptz;

-- name: jobs_turns_since
-- The turns settled since $1, by the kind of their first mail and how they ran, and the agent processes they started: one turn is the jobs one claim took together (a queue, a claimer, a start); a live session's process's claims (claimer mcp:... for an MCP server, live:... for a worker --live) ran live, another claimer's turn whose first mail is informational ran for its digest (digest), the rest a worker's; a turn that recorded a process (turn_pid: a --command agent, birddog.spawn) spawned one.
-- params: $1 since timestamptz
WITH turns AS (
    SELECT
        (array_agg(j.kind ORDER BY j.priority DESC, j.created_at, j.job_id))[1] AS kind,
        CASE WHEN starts_with(j.worker_id, 'mcp:') OR starts_with(j.worker_id, 'live:')
             THEN 'live'
             WHEN (array_agg(j.kind ORDER BY j.priority DESC, j.created_at, j.job_id))[1]
                  IN ('report', 'receipt')
             THEN 'digest' ELSE 'worker' END AS how,
        count(*)::int AS mails,
        -- An MCP server never starts one (a recovered job keeps its former turn's pid).
        bool_or(j.turn_pid IS NOT NULL AND NOT starts_with(j.worker_id, 'mcp:')) AS spawned
    FROM birddog.jobs j
    WHERE j.state = 'settled' AND j.settled_at >= $1::timestamptz AND j.started_at IS NOT NULL
    GROUP BY j.queue_key, j.worker_id, j.started_at
)
SELECT t.kind, t.how, count(*)::int AS turns, sum(t.mails)::int AS mails,
       count(*) FILTER (WHERE t.spawned)::int AS spawns
FROM turns t
GROUP BY t.kind, t.how
ORDER BY t.kind, t.how;

-- name: jobs_queued_backlog
-- How many jobs are queued in the queues a worker serves, and when the oldest was enqueued; informational jobs waiting for their digest wait for no worker and are counted only with $4 (a live session's count: it takes them at once; jobs_digest_waiting counts them alone).
-- params: $1 queues text[] (null: with $3 null, every queue not starting with $2), $2 reserved queue prefix text, $3 agents text[] (their sessions as well; null: none), $4 digests boolean (count mail waiting for its digest too)
SELECT count(*)::int AS queued, min(j.created_at) AS oldest
FROM birddog.jobs j
WHERE j.state = 'queued' AND ($4::boolean OR NOT coalesce(j.digest_at > now(), false))
  AND CASE
      WHEN $1::text[] IS NULL AND $3::text[] IS NULL THEN NOT starts_with(j.queue, $2::text)
      ELSE j.queue = ANY($1::text[])
          OR (j.agent_id = ANY($3::text[]) AND NOT starts_with(j.queue, $2::text))
  END;

-- name: jobs_digest_waiting
-- How many informational jobs queued in the queues a worker serves wait for their digest, and the earliest digest time among them.
-- params: $1 queues text[] (null: with $3 null, every queue not starting with $2), $2 reserved queue prefix text, $3 agents text[] (their sessions as well; null: none)
SELECT count(*)::int AS jobs, min(j.digest_at) AS next_at
FROM birddog.jobs j
WHERE j.state = 'queued' AND j.digest_at > now()
  AND CASE
      WHEN $1::text[] IS NULL AND $3::text[] IS NULL THEN NOT starts_with(j.queue, $2::text)
      ELSE j.queue = ANY($1::text[])
          OR (j.agent_id = ANY($3::text[]) AND NOT starts_with(j.queue, $2::text))
  END;

-- name: digest_get
-- The digest schedule of agent $1's route (no row: no route; both null: the default).
-- params: $1 agent_id text
SELECT r.digest_daily, r.digest_every_s FROM birddog.routes r WHERE r.agent_id = $1::text;

-- name: digest_set
-- Set agent $1's route's digest schedule (both null: the default); the agent id, none without a route.
-- params: $1 agent_id text, $2 digest_daily time (null: not daily), $3 digest_every_s float8 (null: not every so long)
UPDATE birddog.routes r
SET digest_daily = $2::time, digest_every_s = $3::float8, updated_at = now()
WHERE r.agent_id = $1::text
RETURNING r.agent_id;

-- name: digest_list
-- Every route's digest schedule, by agent id (both null: the default).
-- params: none
SELECT r.agent_id, r.digest_daily, r.digest_every_s FROM birddog.routes r ORDER BY r.agent_id;

-- name: live_heartbeat
-- Keep holder $3's live session of agent $1's session $2 live for $4 seconds more, bounded by the server (birddog.live_heartbeat); when it expires.
-- params: $1 agent_id text, $2 session text, $3 holder text, $4 ttl_s float8
SELECT birddog.live_heartbeat($1::text, $2::text, $3::text, $4::float8) AS expires_at,
       now() AS at;

-- name: live_leave
-- End holder $3's live session of agent $1's session $2 (birddog.live_leave); whether it had one.
-- params: $1 agent_id text, $2 session text, $3 holder text
SELECT birddog.live_leave($1::text, $2::text, $3::text);

-- name: live_list
-- The live sessions (of agent $1, or all when null), by agent, session and holder.
-- params: $1 agent_id text (null: every agent)
SELECT l.agent_id, l.session, l.holder, l.started_at, l.expires_at
FROM birddog.live_sessions l
WHERE l.expires_at > now() AND ($1::text IS NULL OR l.agent_id = $1::text)
ORDER BY l.agent_id, l.session, l.holder;

-- name: live_grace_get
-- The live grace of agent $1's route (null: no route, or the default).
-- params: $1 agent_id text
SELECT r.live_grace_s FROM birddog.routes r WHERE r.agent_id = $1::text;

-- name: live_grace_set
-- Set agent $1's route's live grace ($2 null: the default); the agent id, none without a route.
-- params: $1 agent_id text, $2 live_grace_s float8 (null: the default)
UPDATE birddog.routes r SET live_grace_s = $2::float8, updated_at = now()
WHERE r.agent_id = $1::text
RETURNING r.agent_id;

-- name: demo_database_drop
-- Drop the demo's own database (left by an earlier demo, or at the end of this one).
-- params: none
DROP DATABASE IF EXISTS birddog_demo WITH (FORCE);

-- name: demo_database_create
-- Create the demo's own database on the same server, so the demo never writes into the user's.
-- params: none
CREATE DATABASE birddog_demo;

-- name: probe_discard
-- Remove a failed probe's own canary reply (never a user's row: keys start with "outbox:probe:").
-- params: $1 key text
DELETE FROM birddog.outbox WHERE key = $1 AND key LIKE 'outbox:probe:%';

-- name: outbox_release_claim
-- Give back rows still held by their claim ($1, per row) untouched, due as before.
-- params: $1 claims uuid[], $2 keys text[]
UPDATE birddog.outbox o
SET claim_token = NULL, lease_expires_at = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::text[]) AS r(claim, key)
WHERE o.key = r.key AND o.claim_token = r.claim;

-- ---------------------------------------------------------------------------------------
-- retention (opt-in: `birddog prune`, BIRDDOG_RETAIN_*)
-- Each statement deletes at most one batch, so no lock is held for long; the caller
-- repeats it until a batch comes back short. SKIP LOCKED leaves rows a daemon holds alone.
-- ---------------------------------------------------------------------------------------

-- name: prune_receipts
-- Delete up to $2 receipts delivered before $1.
-- params: $1 before timestamptz, $2 batch int
DELETE FROM birddog.receipts rc
WHERE rc.key IN (
    SELECT r.key FROM birddog.receipts r
    WHERE r.delivered_at < $1::timestamptz
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED
);

-- name: prune_settled_jobs
-- Delete up to $2 jobs settled before $1.
-- params: $1 before timestamptz, $2 batch int
DELETE FROM birddog.jobs j
WHERE j.job_id IN (
    SELECT s.job_id FROM birddog.jobs s
    WHERE s.state = 'settled' AND s.settled_at < $1::timestamptz
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED
);

-- name: prune_dead_letters
-- Delete up to $2 dead letters that died before $1.
-- params: $1 before timestamptz, $2 batch int
DELETE FROM birddog.outbox o
WHERE o.key IN (
    SELECT d.key FROM birddog.outbox d
    WHERE d.state = 'dead' AND d.dead_at < $1::timestamptz
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED
);

-- name: prune_read_mailbox
-- Delete up to $2 mailbox replies read before $1 (their receipts stay).
-- params: $1 before timestamptz, $2 batch int
DELETE FROM birddog.mailbox m
WHERE m.key IN (
    SELECT b.key FROM birddog.mailbox b
    WHERE b.read_at < $1::timestamptz
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED
);

-- ---------------------------------------------------------------------------------------
-- roles: least privilege (birddog migrate --roles). Each process connects as a login
-- that is a member of one of these group roles, and can do what that process needs only.
-- ---------------------------------------------------------------------------------------

-- name: roles_create
-- Create the seven group roles (NOLOGIN) that do not exist yet; needs CREATEROLE only then.
-- params: none
DO $roles$
DECLARE
    wanted text;
BEGIN
    FOREACH wanted IN ARRAY ARRAY[
        'birddog_owner', 'birddog_daemon', 'birddog_worker', 'birddog_sender', 'birddog_reader',
        'birddog_agent', 'birddog_a2a'
    ] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = wanted) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', wanted);
            EXCEPTION WHEN duplicate_object THEN
                NULL;
            END;
        END IF;
    END LOOP;
END
$roles$;

-- name: roles_installed
-- Whether birddog_owner owns the birddog schema (roles installed), and whether this login may act as it.
-- params: none
SELECT
    coalesce(bool_or(r.rolname = 'birddog_owner'), false) AS installed,
    coalesce(bool_or(r.rolname = 'birddog_owner' AND pg_has_role(current_user, r.oid, 'MEMBER')), false) AS member
FROM pg_namespace n
JOIN pg_roles r ON r.oid = n.nspowner
WHERE n.nspname = 'birddog';

-- name: roles_own
-- Give the schema and everything in it (tables, views, sequences, functions) to birddog_owner, so DDL needs that role and nothing else owns a table.
-- params: none
DO $own$
DECLARE
    item record;
BEGIN
    IF (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'birddog') <> 'birddog_owner' THEN
        ALTER SCHEMA birddog OWNER TO birddog_owner;
    END IF;
    FOR item IN
        SELECT c.relname,
            CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'birddog'
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND pg_get_userbyid(c.relowner) <> 'birddog_owner'
          AND NOT EXISTS (
              SELECT 1 FROM pg_depend d
              WHERE d.objid = c.oid AND d.deptype IN ('a', 'i') AND c.relkind = 'S'
          )
    LOOP
        EXECUTE format('ALTER %s birddog.%I OWNER TO birddog_owner', item.kind, item.relname);
    END LOOP;
    -- The SECURITY DEFINER functions run as their owner: birddog_owner, never a superuser.
    FOR item IN
        SELECT p.oid::regprocedure::text AS signature
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'birddog' AND pg_get_userbyid(p.proowner) <> 'birddog_owner'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO birddog_owner', item.signature);
    END LOOP;
END
$own$;

-- name: roles_grant
-- Set each role's privileges to exactly what its processes need (revoke all, then grant).
-- params: none
DO $grant$
BEGIN
    REVOKE ALL ON ALL TABLES IN SCHEMA birddog
        FROM birddog_daemon, birddog_worker, birddog_sender, birddog_reader, birddog_agent,
             birddog_a2a;
    REVOKE ALL ON SCHEMA birddog FROM PUBLIC;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA birddog
        FROM PUBLIC, birddog_daemon, birddog_worker, birddog_sender, birddog_reader,
             birddog_agent, birddog_a2a;
    GRANT USAGE ON SCHEMA birddog
        TO birddog_daemon, birddog_worker, birddog_sender, birddog_reader, birddog_agent,
           birddog_a2a;
    GRANT SELECT ON birddog.alembic_version
        TO birddog_daemon, birddog_worker, birddog_sender, birddog_reader, birddog_agent,
           birddog_a2a;
    -- The daemon and the operator's commands (route, replay, prune, probe, secrets rekey,
    -- jobs cancel, the console): every row, no DDL.
    GRANT SELECT, INSERT, UPDATE, DELETE ON
        birddog.outbox, birddog.receipts, birddog.wake, birddog.routes, birddog.jobs,
        birddog.mailbox, birddog.daemons, birddog.queue_heads, birddog.live_sessions
        TO birddog_daemon;
    GRANT SELECT ON birddog.pending, birddog.dead_letters TO birddog_daemon;
    -- The operator's `birddog agent` commands: agents and their tokens (digests only).
    GRANT SELECT, INSERT, UPDATE, DELETE
        ON birddog.agents, birddog.agent_tokens, birddog.agent_logins
        TO birddog_daemon;
    -- Jobs and mailboxes change through the rules (the SECURITY DEFINER functions of
    -- migrations 0007 and 0008) for every role; the daemon, which may write every row
    -- anyway, may call each of them (the operators' cancel and agent logins among them).
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA birddog TO birddog_daemon;
    -- The worker: claims, heartbeats and settles jobs and reaps lost ones, only through
    -- the functions (the claim token checked, the replies derived from the job's stored
    -- mail), and enqueues what a handler sends on; reads jobs; announces and ends the live
    -- sessions it serves (worker --live, an MCP server's); no outbox, route, mailbox or
    -- wake row of its own making.
    -- Every column of jobs but the claim token, which only birddog.claim hands out (to
    -- the claimer it chose): a login that read another claim's token could settle that
    -- job with an answer of its own. The sender and the A2A server read the same columns
    -- (of the jobs their login sent: row-level security, below).
    EXECUTE format(
        'GRANT SELECT (%s) ON birddog.jobs TO birddog_worker, birddog_sender, birddog_a2a',
        (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
         FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = 'birddog.jobs'::regclass AND a.attnum > 0
           AND NOT a.attisdropped AND a.attname <> 'claim_token')
    );
    -- Its row in daemons (birddog status) only through daemons_beat and daemons_stop:
    -- its own login's rows, kind worker, the server's times; no row of its own making.
    -- It reads them (`health --worker` without metrics asks for its host's heartbeat).
    GRANT SELECT ON birddog.daemons TO birddog_worker;
    GRANT EXECUTE ON FUNCTION
        birddog.enqueue(text, text, text, smallint, text, text, timestamptz, text, boolean,
                        timestamptz, double precision),
        birddog.claim(text[], integer, timestamptz, text, integer, timestamptz, text,
                      text[], integer),
        birddog.heartbeat(text, uuid, timestamptz),
        birddog.settle(text, uuid, text, text, text, text, text, text, timestamptz, integer,
                       text, boolean),
        birddog.reap(text, text[], integer[], text[], text[], timestamptz, timestamptz, text,
                     text, integer, boolean),
        birddog.record_turn(text, uuid, text, text, integer, bigint),
        birddog.agent_token_use(bytea),
        birddog.send_mail(text, text, boolean, boolean, text, text, text, text, text,
                          smallint, text, text, timestamptz, text, timestamptz,
                          double precision),
        birddog.session_known(text, text),
        birddog.ensure_mailbox(text),
        birddog.queue_heads_repair(),
        birddog.live_heartbeat(text, text, text, double precision),
        birddog.live_leave(text, text, text),
        birddog.daemons_beat(text, text, text, integer),
        birddog.daemons_stop(text)
        TO birddog_worker;
    GRANT SELECT ON birddog.live_sessions TO birddog_worker;
    -- The sender (send, ask, inbox, the library's enqueue): enqueues queued jobs (with a
    -- mailbox route for an asker without a route) and acknowledges replies through the
    -- functions; reads the jobs its login sent and the replies to them (row-level security,
    -- below), and which agents have a route; never a secret or a URL, and no row of its own
    -- making. It announces no live session: it serves none, and a live session it named
    -- would hold that agent's mail back from its workers for the grace. It may set and delete a push config's reply address on the unsettled jobs
    -- its login sent, for the agent the mail is from (the A2A server's only job writes).
    -- (SELECT on every column of jobs but claim_token: granted with the worker's, above.)
    GRANT SELECT (agent_id, kind, enabled) ON birddog.routes TO birddog_sender;
    GRANT SELECT ON birddog.mailbox TO birddog_sender;
    GRANT EXECUTE ON FUNCTION
        birddog.enqueue(text, text, text, smallint, text, text, timestamptz, text, boolean,
                        timestamptz, double precision),
        birddog.ack(text[], timestamptz),
        birddog.agent_token_use(bytea),
        birddog.mailbox_visible(text, text),
        birddog.job_visible(text, jsonb),
        birddog.send_mail(text, text, boolean, boolean, text, text, text, text, text,
                          smallint, text, text, timestamptz, text, timestamptz,
                          double precision),
        birddog.session_known(text, text),
        birddog.ensure_mailbox(text),
        birddog.ask_standing(text, text, text, double precision),
        birddog.a2a_reply_to_add(text, jsonb, text),
        birddog.a2a_reply_to_remove(text, jsonb, text)
        TO birddog_sender;
    -- An agent's own login (birddog agent add AGENT --login): what a sender may, for its
    -- own agent only (mail from itself, its own mailbox, the jobs it sent or serves), and
    -- claim, heartbeat and settle its own jobs and announce and end its own live sessions
    -- (live_heartbeat and live_leave check the agent); never another claim's token.
    GRANT SELECT (
        job_id, queue, lane, priority, state, payload, recovery, outcome, lease_expires_at,
        recovery_count, cancel_requested_at, cancel_content, result_content, diagnostic,
        worker_id, created_at, updated_at, settled_at, slot, started_at, traceparent, sent_by,
        turn_host, turn_boot_id, turn_pid, turn_start_ticks, agent_id, not_before, expires_at,
        digest_at
    ) ON birddog.jobs TO birddog_agent;
    GRANT SELECT (agent_id, kind, enabled) ON birddog.routes TO birddog_agent;
    GRANT SELECT ON birddog.mailbox TO birddog_agent;
    GRANT EXECUTE ON FUNCTION
        birddog.enqueue(text, text, text, smallint, text, text, timestamptz, text, boolean,
                        timestamptz, double precision),
        birddog.claim(text[], integer, timestamptz, text, integer, timestamptz, text,
                      text[], integer),
        birddog.heartbeat(text, uuid, timestamptz),
        birddog.settle(text, uuid, text, text, text, text, text, text, timestamptz, integer,
                       text, boolean),
        birddog.record_turn(text, uuid, text, text, integer, bigint),
        birddog.ack(text[], timestamptz),
        birddog.mailbox_visible(text, text),
        birddog.job_visible(text, jsonb),
        birddog.send_mail(text, text, boolean, boolean, text, text, text, text, text,
                          smallint, text, text, timestamptz, text, timestamptz,
                          double precision),
        birddog.session_known(text, text),
        birddog.ensure_mailbox(text),
        birddog.ask_standing(text, text, text, double precision),
        birddog.live_heartbeat(text, text, text, double precision),
        birddog.live_leave(text, text, text),
        birddog.daemons_beat(text, text, text, integer),
        birddog.daemons_stop(text)
        TO birddog_agent;
    -- The A2A server (birddog a2a): a sender's sends and reads for its callers (the jobs
    -- its login sent, which agents have a route), the push configs' routes and its
    -- callers' cancels through functions that check the caller's agent, nothing else; no
    -- mailbox, no outbox, no route's URL or secret but a push config's own, no row
    -- written directly.
    GRANT SELECT (agent_id, kind, enabled) ON birddog.routes TO birddog_a2a;
    GRANT EXECUTE ON FUNCTION
        birddog.enqueue(text, text, text, smallint, text, text, timestamptz, text, boolean,
                        timestamptz, double precision),
        birddog.agent_token_use(bytea),
        birddog.job_visible(text, jsonb),
        birddog.send_mail(text, text, boolean, boolean, text, text, text, text, text,
                          smallint, text, text, timestamptz, text, timestamptz,
                          double precision),
        birddog.session_known(text, text),
        birddog.ensure_mailbox(text),
        birddog.a2a_reply_to_add(text, jsonb, text),
        birddog.a2a_reply_to_remove(text, jsonb, text),
        birddog.a2a_push_route(text),
        birddog.a2a_push_route_add(text, text, text),
        birddog.a2a_cancel(text, text, text, integer, boolean)
        TO birddog_a2a;
    -- Mailboxes and jobs are private (row-level security; the owner, whose functions
    -- write them, is not bound by it): operators see every row, a sender the jobs its
    -- login sent and the replies to them, an agent's login its own mailbox and the jobs
    -- it sent or serves.
    ALTER TABLE birddog.mailbox ENABLE ROW LEVEL SECURITY;
    ALTER TABLE birddog.jobs ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS mailbox_operators ON birddog.mailbox;
    DROP POLICY IF EXISTS mailbox_own ON birddog.mailbox;
    DROP POLICY IF EXISTS jobs_operators ON birddog.jobs;
    DROP POLICY IF EXISTS jobs_own ON birddog.jobs;
    CREATE POLICY mailbox_operators ON birddog.mailbox TO birddog_daemon
        USING (true) WITH CHECK (true);
    CREATE POLICY mailbox_own ON birddog.mailbox FOR SELECT TO birddog_sender, birddog_agent
        USING (birddog.mailbox_visible(agent_id, in_reply_to));
    CREATE POLICY jobs_operators ON birddog.jobs TO birddog_daemon, birddog_worker, birddog_reader
        USING (true) WITH CHECK (true);
    CREATE POLICY jobs_own ON birddog.jobs FOR SELECT
        TO birddog_sender, birddog_agent, birddog_a2a
        USING (birddog.job_visible(sent_by, payload));
    -- The reader (status, check, pending, dead): the views and counts; no content, no
    -- secret, no URL.
    GRANT SELECT ON birddog.pending, birddog.dead_letters, birddog.daemons TO birddog_reader;
    -- Live sessions: who serves which agent session now (no content).
    GRANT SELECT ON birddog.live_sessions TO birddog_reader;
    -- The server's limits (no secret): check compares leases and holds with them.
    GRANT SELECT ON birddog.limits TO birddog_reader;
    GRANT SELECT (
        key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome, state,
        attempts, deferrals, due_at, created_at, updated_at, last_error, dead_reason, dead_at,
        lease_expires_at
    ) ON birddog.outbox TO birddog_reader;
    GRANT SELECT (agent_id, kind, enabled, held_at, updated_at) ON birddog.routes TO birddog_reader;
    GRANT SELECT (
        job_id, queue, lane, priority, state, outcome, recovery_count, lease_expires_at,
        cancel_requested_at, worker_id, created_at, updated_at, settled_at, started_at, slot,
        agent_id, not_before, expires_at, queue_key, kind, turn_pid, digest_at
    ) ON birddog.jobs TO birddog_reader;
END
$grant$;

-- name: roles_lock
-- Take the migration lock for the rest of the transaction (grants made concurrently would collide).
-- params: $1 lock_id int8
SELECT pg_advisory_xact_lock($1::int8);

-- name: roles_act_as_owner
-- For the rest of the transaction, act as birddog_owner (so what is granted is granted by the owner).
-- params: none
SET LOCAL ROLE birddog_owner;

-- ---------------------------------------------------------------------------------------
-- the schema's functions as files (postgres/functions/): what the test and the revision
-- writer compare with the files
-- ---------------------------------------------------------------------------------------

-- name: schema_functions
-- Every function of the birddog schema as PostgreSQL prints it, by name, overloads in order of their argument types.
-- params: none
SELECT p.proname::text AS name,
       pg_get_function_identity_arguments(p.oid) AS arguments,
       pg_get_functiondef(p.oid) AS definition
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'birddog' AND p.prokind IN ('f', 'p')
ORDER BY p.proname COLLATE "C", pg_get_function_identity_arguments(p.oid) COLLATE "C";
