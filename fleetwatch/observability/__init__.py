"""What operators look at: Grafana dashboards built as code from the metrics the stages export
and the API's database, and publishing them to a Grafana."""
