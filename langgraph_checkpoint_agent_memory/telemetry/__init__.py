"""OpenTelemetry traces and metrics of the package's operations (see :mod:`.tracing`)."""
