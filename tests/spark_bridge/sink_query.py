"""A streaming query copying topic SRC to topic DST through the ringlog sink, in small
micro-batches: ``python -m tests.spark_bridge.sink_query DATA_DIR SRC DST CHECKPOINT`` runs it
until killed (test_sink_stream kills it with SIGKILL); ``copy_query`` is the same query for
the test's own session."""
from __future__ import annotations

import sys

ROWS_PER_BATCH = 40


def copy_query(spark, data_dir, src, dst, checkpoint, rows_per_batch=ROWS_PER_BATCH):
    """The DataStreamWriter of the query (not started); ``rows_per_batch`` None: no limit
    (a replayed micro-batch keeps the offsets it was planned with)."""
    reader = (spark.readStream.format("ringlog").option("bootstrap.servers", data_dir)
              .option("subscribe", src).option("startingOffsets", "earliest"))
    if rows_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", rows_per_batch)
    df = reader.load()
    return (df.select("key", "value").writeStream.format("ringlog")
            .option("kafka.bootstrap.servers", data_dir).option("topic", dst)
            .option("checkpointLocation", checkpoint))


def main(argv):
    from spark_bridge import get_spark

    data_dir, src, dst, checkpoint = argv
    spark = get_spark(app_name="sink-query")
    query = copy_query(spark, data_dir, src, dst, checkpoint) \
        .trigger(processingTime="200 milliseconds").start()
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
