CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to: an operator every row; an agent's login its own mailbox only; a
    -- sender's login the replies to the mail it sent (the ask it waits on), nothing else.
    -- A mail key is one job's (jobs_mail_key_idx is unique, and enqueue refuses a key
    -- another job carries), so a reply's visibility follows the job that produced it: a
    -- login cannot reuse another's key to read or acknowledge its replies.
    IF birddog._sees_everything() THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    IF v_agent IS NOT NULL THEN
        RETURN p_agent_id = v_agent;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = p_in_reply_to AND j.sent_by = session_user
    );
END
$function$
