"""Reporting: what is read out of results files for people and papers. The report's rows and statistics
(`summary`, `scan`, `stats`), its terminal table, paper formats, figures and HTML page (`table`, `formats`, `plots`,
`html`), what `run` prints (`run_view`), the turns (`show`), training data and Inspect logs (`export`,
`inspect_log`), and `rerank`. It reads the records judging wrote; judging itself is `userturn.judges`."""
