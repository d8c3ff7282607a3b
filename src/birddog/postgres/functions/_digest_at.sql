CREATE OR REPLACE FUNCTION birddog._digest_at(p_agent_id text, p_at timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_daily time;
    v_every_s double precision;
    v_stride interval;
    v_start timestamptz;
BEGIN
    -- The first digest time of agent p_agent_id's route at or after p_at (birddog.core.digests):
    -- every digest_every_s seconds since 1970-01-01 00:00 UTC, or daily at digest_daily UTC
    -- (08:00 without a route or a schedule of its own).
    SELECT r.digest_daily, r.digest_every_s INTO v_daily, v_every_s
    FROM birddog.routes r WHERE r.agent_id = p_agent_id;
    IF v_every_s IS NOT NULL THEN
        v_stride := make_interval(secs => v_every_s);
        v_start := date_bin(v_stride, p_at, timestamptz '1970-01-01 00:00:00+00');
    ELSE
        v_stride := interval '1 day';
        v_start := date_bin(
            v_stride, p_at,
            timestamptz '1970-01-01 00:00:00+00' + (coalesce(v_daily, time '08:00') - time '00:00')
        );
    END IF;
    RETURN CASE WHEN v_start >= p_at THEN v_start ELSE v_start + v_stride END;
END
$function$
