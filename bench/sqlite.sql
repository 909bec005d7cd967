-- Benchmark (b) of bench/memory.py: build a 300k-row table with an index in memory.
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO t SELECT x, printf('name-%08d', (x * 7919) % 1000003), x % 97, hex(randomblob(24)) FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(grp) FROM t;
