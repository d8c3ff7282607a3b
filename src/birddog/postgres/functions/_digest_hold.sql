CREATE OR REPLACE FUNCTION birddog._digest_hold(p_queue_key text, p_due_at timestamp with time zone, p_claimer text, p_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    -- Whether a claim by p_claimer at p_at leaves a job of queue p_queue_key (or the queue's
    -- head row) due at p_due_at for its digest: the time is still to come and p_claimer holds
    -- no live session of the queue (a live session takes informational mail at once). NULL
    -- p_due_at: due now. A plain SQL function: the claim's queries inline it.
    SELECT coalesce(p_due_at > p_at, false) AND NOT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        WHERE l.queue_key = p_queue_key AND l.holder = p_claimer AND l.expires_at > now()
    )
$function$
