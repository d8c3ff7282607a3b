CREATE OR REPLACE FUNCTION birddog._format_bytes(p_size bigint)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_unit bigint;
    v_tenths numeric;
    v_rest numeric;
BEGIN
    -- format_bytes: '512 bytes', '64 KiB', '1.3 MiB' (one decimal, rounded half to even
    -- as Python's format does, '.0' dropped).
    IF p_size < 1024 THEN
        RETURN p_size::text || CASE WHEN p_size = 1 THEN ' byte' ELSE ' bytes' END;
    END IF;
    v_unit := CASE WHEN p_size < 1048576 THEN 1024 ELSE 1048576 END;
    v_tenths := div(p_size * 10, v_unit);
    v_rest := mod(p_size * 10, v_unit);
    IF 2 * v_rest > v_unit OR (2 * v_rest = v_unit AND mod(v_tenths, 2) = 1) THEN
        v_tenths := v_tenths + 1;
    END IF;
    RETURN div(v_tenths, 10)::text
        || CASE WHEN mod(v_tenths, 10) = 0 THEN '' ELSE '.' || mod(v_tenths, 10)::text END
        || CASE WHEN v_unit = 1024 THEN ' KiB' ELSE ' MiB' END;
END
$function$
