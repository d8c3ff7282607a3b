#!/bin/sh
# Runs once, when the postgres container first initialises its data directory: one login
# per BirdDog process, each a member of the role `birddog migrate --roles` then grants.
# The group roles are made here too (NOLOGIN, no privileges yet) so the logins can join
# them; `migrate --roles` finds them and only sets their privileges.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v run_password="$BIRDDOG_RUN_PASSWORD" \
    -v work_password="$BIRDDOG_WORK_PASSWORD" <<'SQL'
CREATE ROLE birddog_owner NOLOGIN;
CREATE ROLE birddog_daemon NOLOGIN;
CREATE ROLE birddog_worker NOLOGIN;
CREATE ROLE birddog_sender NOLOGIN;
CREATE ROLE birddog_reader NOLOGIN;
CREATE ROLE birddog_run LOGIN PASSWORD :'run_password' IN ROLE birddog_daemon;
CREATE ROLE birddog_work LOGIN PASSWORD :'work_password' IN ROLE birddog_worker;
SQL
