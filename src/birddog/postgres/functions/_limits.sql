CREATE OR REPLACE FUNCTION birddog._limits(OUT bound boolean, OUT max_content_bytes integer, OUT max_lease_s double precision, OUT max_priority smallint, OUT max_reply_to integer, OUT max_age_s double precision)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The server's bounds on the caller of a write function: birddog.limits (its one row,
    -- which only the owner changes), or none (bound false, every limit NULL) for an
    -- operator (birddog._sees_everything: superusers, the owner and the daemon, and every
    -- login while the roles are not installed), which may write the rows directly anyway.
    -- A NULL limit bounds nothing: least() and greatest() pass over it.
    bound := NOT birddog._sees_everything();
    IF NOT bound THEN
        RETURN;
    END IF;
    SELECT l.max_content_bytes, l.max_lease_s, l.max_priority, l.max_reply_to, l.max_age_s
    INTO max_content_bytes, max_lease_s, max_priority, max_reply_to, max_age_s
    FROM birddog.limits l;
    IF NOT FOUND THEN
        -- The defaults of revision 0031, should the row be deleted.
        max_content_bytes := 1048576;
        max_lease_s := 3600;
        max_priority := 100;
        max_reply_to := 100;
        max_age_s := 300;
    END IF;
END
$function$
