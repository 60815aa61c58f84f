// Reads a partitioned `replay export --format parquet` directory with DuckDB, an
// engine independent of camproxy's Go writer, as ONE table
// (read_parquet('DIR/**/*.parquet', hive_partitioning=1)), and prints what the Go
// test (replay.TestParquetPartitionedInDuckDB) compares with the Go report: row count,
// partitions, the table's columns and types, reward and success by task and arm, and
// values queried out of the nested messages (list of struct with tool_calls).
import { DuckDBInstance } from '@duckdb/node-api'

const dir = process.argv[2]
const instance = await DuckDBInstance.create(':memory:')
const db = await instance.connect()
const glob = `${dir.replaceAll("'", "''")}/**/*.parquet`
await db.run(`CREATE VIEW t AS SELECT * FROM read_parquet('${glob}', hive_partitioning = 1)`)

const rows = async (sql) => (await db.runAndReadAll(sql)).getRowObjectsJson()

// Success as the report counts it: the harness's flag when it sent one, else reward >= 1.
const success = 'CASE WHEN reward IS NULL THEN NULL WHEN success IS NOT NULL THEN success::INT ELSE (reward >= 1)::INT END'
const out = {
  version: (await rows('SELECT version() AS v'))[0].v,
  columns: await rows(`SELECT column_name, column_type FROM (DESCRIBE t) ORDER BY column_name`),
  count: Number((await rows('SELECT count(*) AS n FROM t'))[0].n),
  files: Number((await rows(`SELECT count(*) AS n FROM glob('${glob}')`))[0].n),
  partitions: await rows(`SELECT ${process.argv.slice(3).map((c) => `${c}::VARCHAR AS ${c}`).join(', ')}, count(*)::INT AS n
    FROM t GROUP BY ALL ORDER BY ALL`),
  byTaskArm: await rows(`SELECT task_id, arm, count(*)::INT AS episodes, count(reward)::INT AS rewarded,
      avg(reward) AS mean_reward, avg(${success}) AS success_rate
    FROM t GROUP BY task_id, arm ORDER BY task_id, arm`),
  byArm: await rows(`SELECT arm, count(*)::INT AS episodes, count(reward)::INT AS rewarded, avg(reward) AS mean_reward, avg(${success}) AS success_rate
    FROM t GROUP BY arm ORDER BY arm`),
  // Into the nested messages: every tool call's function name, counted.
  toolCalls: await rows(`SELECT tc.function.name AS name, count(*)::INT AS n
    FROM (SELECT unnest(m.tool_calls) AS tc FROM (SELECT unnest(messages) AS m FROM t))
    GROUP BY name ORDER BY name`),
  // One episode's messages by role and its first tool answer.
  episode: await rows(`SELECT episode_id, len(messages)::INT AS messages,
      list_transform(messages, x -> x.role) AS roles,
      list_filter(messages, x -> x.role = 'tool')[1].tool_call_id AS first_tool_call_id,
      list_filter(messages, x -> x.role = 'tool')[1].content AS first_tool_content,
      epoch_ms(started_at)::DOUBLE AS started_ms
    FROM t ORDER BY episode_id LIMIT 1`),
}
process.stdout.write(JSON.stringify(out))
