CREATE OR REPLACE FUNCTION birddog._cancel_grace()
 RETURNS interval
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- How long a running job's worker has to stop its turn once a cancellation is asked:
    -- birddog.limits.cancel_grace_s (60 s by default, should the row be deleted), for every
    -- caller, operators included: the lease never outlives it.
    RETURN make_interval(secs => coalesce((SELECT l.cancel_grace_s FROM birddog.limits l), 60));
END
$function$
