"""Spark and log4j defaults that hopsml ships; installed as the package hopsml.conf."""
