"""Retrieval over a task's sources, on the worker side: the executors behind `shoal mcp sources`.

- `chunks`: a source's text cut into passages of whole sentences (`sentences`: where they end,
  and `shorten` for any snippet), each with its citation in the user's terms (a PDF's page, or
  the heading and lines);
- `passages`: a citation (an id or a label) resolved back to its passage, and `quote_in`, for
  code that checks what a report cites;
- `folder`: the files of a task's `sources/` folder and the names they are cited by;
- `index`: one SQLite file per source content hash (chunks, an FTS5 table for BM25, embeddings
  per model), built once and reused by every later task over the same file;
- `embeddings`: the configured provider's embeddings endpoint (OpenAI-compatible or Ollama);
- `corpus`: a task's indexes searched as one collection (one BM25 table, one vector matrix);
- `search`: hybrid search, BM25 and exact vector similarity fused by reciprocal rank, or BM25
  alone when there are no embeddings (the result says which ran);
- `sql`: one read-only SQL statement over the data sources (CSV, Parquet, SQLite, Excel) in
  DuckDB; `answers`: what its rows mean (sizes, order, a warning), their citation, and the SQL
  run again for a check.

Nothing here imports the control plane (an import-linter contract says so).
"""
