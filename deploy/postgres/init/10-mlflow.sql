-- Run once by the postgres image when its data volume is new: MLflow's database beside the
-- API's (POSTGRES_DB), owned by the same user. Two databases, because both keep their
-- Alembic revision in a table named alembic_version.
CREATE DATABASE mlflow;
