"""A serving's instance process, run as `python -m hopsml.serving.instance` by the supervisor: its program
(`__main__`, then `serve`), the HTTP/1.1 server (`http_server`), the REST protocols on it (`protocol`,
`v2_binary`), the model loaders (`loaders`), dynamic batching (`batching`), several models per process
(`multiplex`), the inference log's writer and reader (`inference_log`) and repeated failures logged once
(`repeats`). Of serving's modules it imports only its own and the shared ones (`definition`, `autoscale`)."""
