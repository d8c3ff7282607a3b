CREATE OR REPLACE FUNCTION birddog._field(p_object jsonb, p_json_name text, p_python_name text)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    -- A model field by its JSON name, else its Python name (models take both).
    IF p_object ? p_json_name THEN
        RETURN p_object -> p_json_name;
    END IF;
    RETURN p_object -> p_python_name;
END
$function$
