"""moto's S3 server as a WSGI application, for a WSGI server that speaks HTTP/1.1 as S3
clients expect (``gunicorn tests.integration.s3_server:app``). moto's own command runs it
under Werkzeug's development server, whose interim ``100 Continue`` the AWS SDK of Hadoop's
S3A connector takes for the final answer to an upload (status 100): every PutObject of a
file fails and is retried."""

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

app = DomainDispatcherApplication(create_backend_app)
