CREATE OR REPLACE FUNCTION birddog._address(p_value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_agent jsonb;
    v_session jsonb;
BEGIN
    -- An AgentAddress as the core writes it ({kind, agentId, sessionId}), or NULL when the
    -- value is not one: no unknown field, kind "agent" if given, both ids 1 to 256
    -- characters without a control character.
    IF jsonb_typeof(p_value) IS DISTINCT FROM 'object'
       OR (p_value - ARRAY['kind', 'agentId', 'agent_id', 'sessionId', 'session_id']) <> '{}'
       OR coalesce(p_value -> 'kind', '"agent"') <> '"agent"' THEN
        RETURN NULL;
    END IF;
    v_agent := CASE WHEN p_value ? 'agentId' THEN p_value -> 'agentId'
                    ELSE p_value -> 'agent_id' END;
    v_session := CASE WHEN p_value ? 'sessionId' THEN p_value -> 'sessionId'
                      ELSE p_value -> 'session_id' END;
    IF jsonb_typeof(v_agent) IS DISTINCT FROM 'string'
       OR jsonb_typeof(v_session) IS DISTINCT FROM 'string'
       OR char_length(v_agent #>> '{}') NOT BETWEEN 1 AND 256
       OR char_length(v_session #>> '{}') NOT BETWEEN 1 AND 256
       OR ((v_agent #>> '{}') || (v_session #>> '{}')) ~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]' THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object('kind', 'agent', 'agentId', v_agent, 'sessionId', v_session);
END
$function$
