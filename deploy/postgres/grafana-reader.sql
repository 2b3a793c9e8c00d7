-- A role for Grafana's PostgreSQL datasource (`fleetwatch-db`): it may read the tables the
-- dashboards query and nothing else (not api_keys, not webhooks and their signing secrets).
-- Run it as the API's database owner once the API has created its tables (it migrates them at
-- start), and again after an upgrade that adds a table the dashboards read:
--
--   psql "$DATABASE" -v password="'…'" -f deploy/postgres/grafana-reader.sql
--
-- tests/unit/test_dashboards.py checks that every table the dashboards' SQL names is here.
SELECT 'CREATE ROLE grafana_reader LOGIN'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'grafana_reader') \gexec
ALTER ROLE grafana_reader PASSWORD :password;
GRANT SELECT ON devices, device_state, device_sessions, device_models, readings, alerts
  TO grafana_reader;
