CREATE OR REPLACE FUNCTION birddog._max_recoveries(p_recovery jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_budget jsonb;
BEGIN
    -- job_rows.max_recoveries: {"maxRecoveries": 0..1000} (or its Python name), else 0.
    IF NOT birddog._only_keys(p_recovery, ARRAY['maxRecoveries', 'max_recoveries'])
       OR (SELECT count(*) FROM jsonb_object_keys(p_recovery)) <> 1 THEN
        RETURN 0;
    END IF;
    v_budget := birddog._field(p_recovery, 'maxRecoveries', 'max_recoveries');
    IF jsonb_typeof(v_budget) <> 'number' OR (v_budget #>> '{}') !~ '^[0-9]{1,4}$' THEN
        RETURN 0;
    END IF;
    IF (v_budget #>> '{}')::integer > 1000 THEN
        RETURN 0;
    END IF;
    RETURN (v_budget #>> '{}')::integer;
END
$function$
