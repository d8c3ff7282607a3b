CREATE OR REPLACE FUNCTION birddog._cancelled(p_content text, p_diagnostic text, p_limit integer, OUT content text, OUT diagnostic text)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_size bigint := octet_length(p_content);
    v_mark text;
    v_room integer;
    v_note text;
BEGIN
    -- lifecycle._cancelled: the recorded content, cut to the limit with a visible mark
    -- (bounded_content) and a note joined to the caller's bounded diagnostic.
    IF v_size <= p_limit THEN
        content := p_content;
        diagnostic := p_diagnostic;
        RETURN;
    END IF;
    v_mark := E'\n[cut by BirdDog: ' || birddog._format_bytes(v_size) || ' is above the limit]';
    v_room := greatest(p_limit - octet_length(v_mark), 0);
    content := CASE WHEN v_room = 0 THEN birddog._utf8_prefix(p_content, p_limit)
                    ELSE birddog._utf8_prefix(p_content, v_room) || v_mark END;
    v_note := 'the cancellation content was ' || birddog._format_bytes(v_size)
        || '; the limit is ' || birddog._format_bytes(p_limit) || ', so it was cut';
    diagnostic := CASE WHEN p_diagnostic IS NULL THEN v_note
                       ELSE left(p_diagnostic || '; ' || v_note, 200) END;
END
$function$
