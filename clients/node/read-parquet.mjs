// Reads a Parquet file with hyparquet, a reader independent of the Go writer, and
// prints {schema, rows} as JSON: the Go tests check what veRL would load.
import { asyncBufferFromFile, parquetMetadataAsync, parquetSchema, parquetReadObjects } from 'hyparquet'

const file = await asyncBufferFromFile(process.argv[2])
const metadata = await parquetMetadataAsync(file)
const describe = (node) => ({
  name: node.element.name,
  type: node.element.type ?? null,
  converted: node.element.converted_type ?? null,
  logical: node.element.logical_type?.type ?? null,
  repetition: node.element.repetition_type ?? null,
  children: node.children.map(describe),
})
const schema = describe(parquetSchema(metadata))
const rows = await parquetReadObjects({ file, metadata })
process.stdout.write(JSON.stringify({ schema, numRows: Number(metadata.num_rows), rows }, (k, v) => typeof v === 'bigint' ? Number(v) : v))
