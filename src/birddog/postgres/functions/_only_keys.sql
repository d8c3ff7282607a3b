CREATE OR REPLACE FUNCTION birddog._only_keys(p_object jsonb, p_allowed text[])
 RETURNS boolean
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    -- An object with no field a model does not know (extra="forbid").
    IF jsonb_typeof(p_object) IS DISTINCT FROM 'object' THEN
        RETURN false;
    END IF;
    RETURN (p_object - p_allowed) = '{}'::jsonb;
END
$function$
