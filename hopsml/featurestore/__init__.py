"""The feature store: feature groups (tables with history), queries with point-in-time joins, feature views
and their training data, named as the hopsworks SDK names them (`hopsml.hopsworks.login()` opens it)."""
