CREATE OR REPLACE FUNCTION birddog._utf8_prefix(p_text text, p_bytes integer)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_raw bytea := substring(convert_to(p_text, 'UTF8') FROM 1 FOR greatest(p_bytes, 0));
    v_end integer := octet_length(v_raw);
    v_at integer := octet_length(v_raw);
    v_lead integer;
    v_width integer;
BEGIN
    -- The longest prefix of whole characters within p_bytes (Python's decode 'ignore' of
    -- a cut: only a character split at the end is dropped).
    WHILE v_at > 0 AND (get_byte(v_raw, v_at - 1) & 192) = 128 LOOP
        v_at := v_at - 1;
    END LOOP;
    IF v_at > 0 THEN
        v_lead := get_byte(v_raw, v_at - 1);
        v_width := CASE WHEN v_lead < 128 THEN 1 WHEN v_lead >= 240 THEN 4
                        WHEN v_lead >= 224 THEN 3 ELSE 2 END;
        IF v_end - (v_at - 1) < v_width THEN
            v_end := v_at - 1;
        END IF;
    ELSE
        v_end := 0;
    END IF;
    RETURN convert_from(substring(v_raw FROM 1 FOR v_end), 'UTF8');
END
$function$
