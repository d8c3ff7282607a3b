CREATE OR REPLACE FUNCTION birddog._live_hold(p_queue_key text, p_since timestamp with time zone, p_claimer text, p_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    -- Whether a claim by p_claimer at p_at leaves a job of queue p_queue_key, sent at
    -- p_since, to the queue's live session: a live session of the queue (its TTL not passed)
    -- is held by another, none by p_claimer, and the job has not yet waited the grace of its
    -- agent's route (live_grace_s, 30 s by default). A plain SQL function: the claim's
    -- queries inline it (an index probe per candidate queue; none when nothing is live).
    SELECT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        LEFT JOIN birddog.routes r ON r.agent_id = l.agent_id
        WHERE l.queue_key = p_queue_key AND l.expires_at > now()
          AND p_since + make_interval(secs => coalesce(r.live_grace_s, 30)) > p_at
    ) AND NOT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        WHERE l.queue_key = p_queue_key AND l.holder = p_claimer AND l.expires_at > now()
    )
$function$
