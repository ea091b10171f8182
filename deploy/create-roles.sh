#!/bin/sh
# Runs once, when the postgres container initialises its data: creates the three login roles
# tickwork's processes use. They own nothing; `tickwork migrate` (as the owner) grants each
# only what its process needs (sql/grants.sql).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE tickwork_scheduler LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    PASSWORD '${TICKWORK_SCHEDULER_PASSWORD}';
CREATE ROLE tickwork_worker LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    PASSWORD '${TICKWORK_WORKER_PASSWORD}';
CREATE ROLE tickwork_api LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    PASSWORD '${TICKWORK_API_PASSWORD}';
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL
