/*
 * Lakestream: "first copy of each id within a horizon" for the events queries, in Spark's state store.
 *
 * dropDuplicatesWithinWatermark does the same, but Spark 4.1 evicts its expired ids by iterating over every id it
 * holds, on every micro-batch: with rate x horizon ids (2.45 M at 5,000 events/s) that scan cost seconds per batch
 * whatever the batch's size (allRemovalsTimeMs 7.7 s measured on the stack; docs/benchmarks.md). This is the same
 * operator built on transformWithState: one ValueState per id with a TTL of the horizon, which Spark expires
 * through its TTL index ordered by expiry, so a batch pays for the ids that expire, not for all it holds.
 *
 * Semantics: processing time (the batch's timestamp, as the ingest-time watermark before): the first row of an id
 * passes, every row of that id arriving within the horizon after it is dropped, the id is forgotten after the
 * horizon. Which of several copies in one batch passes is arbitrary (as with dropDuplicates).
 *
 * Compiled by `lake stack up` (spark_jobs.stack.tools.build_java_classes) into lake-stream.jar, which the streaming
 * app ships with spark.jars (executors need the class).
 */

import java.time.Duration;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;

public final class LakeDedup extends StatefulProcessor<String, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final long horizonMs;
    private transient ValueState<Boolean> seen;

    public LakeDedup(long horizonMs) {
        if (horizonMs <= 0) {
            throw new IllegalArgumentException("LakeDedup: the horizon must be positive, got " + horizonMs + " ms");
        }
        this.horizonMs = horizonMs;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        seen = getHandle().getValueState("seen", Encoders.BOOLEAN(), TTLConfig.apply(Duration.ofMillis(horizonMs)));
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(String key, scala.collection.Iterator<Row> rows,
                                                          TimerValues timerValues) {
        if (seen.exists()) {
            return scala.collection.Iterator$.MODULE$.empty();
        }
        seen.update(Boolean.TRUE);
        return scala.collection.Iterator$.MODULE$.single(rows.next());
    }

    /** {@code frame}'s rows, the first of each {@code keyColumn} value (a string) within {@code horizonMs}. */
    public static Dataset<Row> apply(Dataset<Row> frame, String keyColumn, long horizonMs) {
        // groupBy(column).as(...): the key is the column itself, so no row is turned into a Java object to find
        // its key (groupByKey(function) would); the handler reads only the first row of a key.
        return frame.groupBy(frame.col(keyColumn)).as(Encoders.STRING(), Encoders.row(frame.schema()))
                .transformWithState(new LakeDedup(horizonMs), TimeMode.ProcessingTime(), OutputMode.Append(),
                        Encoders.row(frame.schema()));
    }
}
