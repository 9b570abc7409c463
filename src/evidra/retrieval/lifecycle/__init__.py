"""An index folder's life: build, open, attach, publish atomically, its manifest and backends."""
