/*
 * Lakestream: the clickstream contract's accept path in the JVM, as a Spark UDF (no Python worker per record).
 *
 * Sound, not complete, like the Python FastCheck it mirrors (spark_jobs/silver/events_arrow.py): it returns the
 * typed fields of a record only when the record is certainly valid and its fields are certainly what the Python
 * classifier would give; for anything else (a reject, or a valid record with a construct it does not judge: a
 * lone surrogate, a control character or a nested value in `properties`, an integer beyond 64 bits, more than
 * max_containers objects/arrays) it returns NULL and the Python classifier, which has the last word, decides.
 * The rules are the contract's (spark_jobs.contracts.events_rules.field_rules), handed over as JSON by
 * spark_jobs.silver.events_jvm, so no rule is written here.
 *
 * Strict where Python's parse is: UTF-8 with no overlong forms or encoded surrogates (Java's decoder with REPORT),
 * one JSON value, no duplicate keys, no NaN, no leading zeros, no comments.
 *
 * Compiled by `lake stack up` (spark_jobs.stack.tools.build_java_classes) into lake-stream.jar.
 */

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.DateTimeException;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.types.DataType;

public final class LakeEventCheck implements UDF2<byte[], Long, Row> {
    private static final long serialVersionUID = 1L;

    private final String rulesJson;
    private transient Compiled compiled;

    public LakeEventCheck(String rulesJson) {
        this.rulesJson = rulesJson;
        this.compiled = new Compiled(rulesJson);  // fail at registration, naming the problem, not in a task
    }

    /** Register the check as {@code name} on {@code spark}, returning the struct type {@code returnDdl}. */
    public static void register(SparkSession spark, String name, String rulesJson, String returnDdl) {
        spark.udf().register(name, new LakeEventCheck(rulesJson), DataType.fromDDL(returnDdl));
    }

    @Override
    public Row call(byte[] value, Long kafkaMicros) {
        if (compiled == null) {
            compiled = new Compiled(rulesJson);
        }
        if (value == null || kafkaMicros == null) {
            return null;
        }
        return compiled.check(value, kafkaMicros);
    }

    /** One field rule of the contract (FieldRule in spark_jobs/contracts/events_rules.py). */
    private static final class Rule {
        final String name;
        final String type;
        final boolean required;
        final Pattern pattern;
        final Set<String> enumValues;
        final JsonNode constValue;
        final long minimum;
        final long maximum;
        final int minLength;
        final int maxLength;

        Rule(JsonNode node) {
            name = node.get("name").asText();
            type = node.get("json_type").asText();
            required = node.get("required").asBoolean();
            JsonNode p = node.get("pattern");
            // Python's re on str: \d, \w, \s are Unicode-aware; so are Java's with this flag.
            pattern = p == null || p.isNull() ? null : Pattern.compile(p.asText(), Pattern.UNICODE_CHARACTER_CLASS);
            JsonNode e = node.get("enum");
            if (e == null || e.isNull()) {
                enumValues = null;
            } else {
                enumValues = new HashSet<>();
                e.forEach(v -> enumValues.add(v.asText()));
            }
            JsonNode c = node.get("const");
            constValue = c == null || c.isNull() ? null : c;
            minimum = longOr(node.get("minimum"), Long.MIN_VALUE);
            maximum = longOr(node.get("maximum"), Long.MAX_VALUE);
            minLength = (int) longOr(node.get("min_length"), 0);
            maxLength = (int) longOr(node.get("max_length"), Integer.MAX_VALUE);
        }

        private static long longOr(JsonNode n, long fallback) {
            if (n == null || n.isNull()) {
                return fallback;
            }
            if (!n.canConvertToLong()) {  // a bound beyond 64 bits: the 64-bit range is the rule then
                return n.asDouble() < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
            }
            return n.asLong();
        }

        /** True only when {@code v} certainly satisfies every keyword of the rule. */
        boolean accepts(JsonNode v) {
            switch (type) {
                case "string": {
                    if (!v.isTextual()) {
                        return false;
                    }
                    String s = v.textValue();
                    if (!plain(s, false)) {
                        return false;
                    }
                    if (enumValues != null && !enumValues.contains(s)) {
                        return false;
                    }
                    if (constValue != null && !(constValue.isTextual() && constValue.textValue().equals(s))) {
                        return false;
                    }
                    int n = s.length();  // no surrogates (plain): characters = code points, as Python's len
                    if (n < minLength || n > maxLength) {
                        return false;
                    }
                    return pattern == null || pattern.matcher(s).find();  // not anchored, as JSON Schema
                }
                case "integer": {
                    if (!(v.isInt() || v.isLong())) {
                        return false;
                    }
                    long x = v.longValue();
                    if (x < minimum || x > maximum) {
                        return false;
                    }
                    return constValue == null || (constValue.isIntegralNumber() && constValue.canConvertToLong()
                            && constValue.longValue() == x);
                }
                case "object":
                    return v.isObject();
                default:  // "any": presence is the whole rule
                    return true;
            }
        }
    }

    /** A property column of silver.events: (name, Spark type, the event type that carries it). */
    private static final class Column {
        final String name;
        final String sparkType;
        final String owner;

        Column(JsonNode node) {
            name = node.get(0).asText();
            sparkType = node.get(1).asText();
            owner = node.get(2).asText();
        }
    }

    private static final class Compiled {
        private static final ObjectMapper MAPPER = JsonMapper.builder()
                .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
                .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
                .enable(DeserializationFeature.FAIL_ON_READING_DUP_TREE_KEY)
                .disable(JsonParser.Feature.ALLOW_COMMENTS)
                .build();

        final int maxBytes;
        final long maxFutureMicros;
        final int maxContainers;
        final Pattern eventTime;
        final boolean additionalFields;
        final List<Rule> fields = new ArrayList<>();
        final Set<String> allowed = new HashSet<>();
        final Map<String, List<Rule>> byType = new HashMap<>();
        final List<Column> columns = new ArrayList<>();

        Compiled(String rulesJson) {
            JsonNode r;
            try {
                r = new ObjectMapper().readTree(rulesJson);
            } catch (java.io.IOException exc) {
                throw new IllegalArgumentException("LakeEventCheck: the rules are not JSON: " + exc.getMessage(), exc);
            }
            maxBytes = r.get("max_bytes").asInt();
            maxFutureMicros = r.get("max_future_seconds").asLong() * 1_000_000L;
            maxContainers = r.get("max_containers").asInt();
            eventTime = Pattern.compile(r.get("event_time_re").asText());
            additionalFields = r.get("additional_fields").asBoolean();
            r.get("fields").forEach(f -> {
                Rule rule = new Rule(f);
                fields.add(rule);
                allowed.add(rule.name);
            });
            Iterator<Map.Entry<String, JsonNode>> types = r.get("by_event_type").fields();
            while (types.hasNext()) {
                Map.Entry<String, JsonNode> e = types.next();
                List<Rule> rules = new ArrayList<>();
                e.getValue().forEach(f -> rules.add(new Rule(f)));
                byType.put(e.getKey(), rules);
            }
            r.get("property_columns").forEach(c -> columns.add(new Column(c)));
        }

        Row check(byte[] value, long kafkaMicros) {
            if (value.length > maxBytes) {
                return null;
            }
            int containers = 0;
            for (byte b : value) {
                if (b == '{' || b == '[') {
                    containers++;
                }
            }
            if (containers > maxContainers) {
                return null;
            }
            String text;
            try {
                text = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(value)).toString();
            } catch (CharacterCodingException exc) {
                return null;
            }
            if (!text.isEmpty() && text.charAt(0) == '\uFEFF') {  // Python's json rejects a BOM
                return null;
            }
            JsonNode doc;
            try {
                doc = MAPPER.readTree(text);
            } catch (java.io.IOException | RuntimeException exc) {
                return null;
            }
            if (doc == null || !doc.isObject()) {
                return null;
            }
            if (!additionalFields) {
                Iterator<String> names = doc.fieldNames();
                while (names.hasNext()) {
                    if (!allowed.contains(names.next())) {
                        return null;
                    }
                }
            }
            for (Rule rule : fields) {
                JsonNode v = doc.get(rule.name);
                if (v == null) {
                    if (rule.required) {
                        return null;
                    }
                } else if (!rule.accepts(v)) {
                    return null;
                }
            }
            JsonNode etype = doc.get("event_type");
            JsonNode props = doc.get("properties");
            List<Rule> propRules = etype != null && etype.isTextual() ? byType.get(etype.textValue()) : null;
            if (propRules != null) {
                if (props == null || !props.isObject()) {
                    return null;
                }
                for (Rule rule : propRules) {
                    JsonNode v = props.get(rule.name);
                    if (v == null) {
                        if (rule.required) {
                            return null;
                        }
                    } else if (!rule.accepts(v)) {
                        return null;
                    }
                }
            }
            JsonNode when = doc.get("event_time");
            if (when == null || !when.isTextual()) {
                return null;
            }
            Long micros = eventMicros(when.textValue());
            if (micros == null || micros > kafkaMicros + maxFutureMicros) {
                return null;
            }
            // What the Python classifier reads from a valid record: these fields must be there with these types
            // (the contract says so; checked again so a contract without them cannot make a wrong row here).
            JsonNode id = doc.get("event_id");
            JsonNode user = doc.get("user_id");
            JsonNode session = doc.get("session_id");
            JsonNode version = doc.get("schema_version");
            if (id == null || !id.isTextual() || etype == null || !etype.isTextual() || user == null
                    || !(user.isInt() || user.isLong()) || session == null || !session.isTextual()
                    || !plain(session.textValue(), false) || !plain(id.textValue(), false)
                    || version == null || !version.isInt() || props == null || !props.isObject()) {
                return null;
            }
            String propertiesText = propertiesText(props);
            if (propertiesText == null) {
                return null;
            }
            Object[] out = new Object[7 + columns.size()];
            out[0] = id.textValue();
            out[1] = etype.textValue();
            out[2] = user.longValue();
            out[3] = session.textValue();
            out[4] = micros;
            out[5] = propertiesText;
            int i = 6;
            for (Column c : columns) {
                JsonNode v = c.owner.equals(etype.textValue()) ? props.get(c.name) : null;
                out[i++] = v == null ? null : typed(c, v);
                if (v != null && out[i - 1] == null) {
                    return null;  // a value this column cannot hold as Python would store it: Python decides
                }
            }
            out[i] = version.intValue();
            return RowFactory.create(out);
        }

        private static Object typed(Column c, JsonNode v) {
            switch (c.sparkType) {
                case "string":
                    return v.isTextual() ? v.textValue() : null;
                case "bigint":
                    return v.isInt() || v.isLong() ? (Object) v.longValue() : null;
                case "int":
                    return v.isInt() ? (Object) v.intValue() : null;
                case "decimal(18,2)": {
                    if (!v.isTextual()) {
                        return null;
                    }
                    BigDecimal d;
                    try {
                        d = new BigDecimal(v.textValue());
                    } catch (NumberFormatException exc) {
                        return null;
                    }
                    return d.scale() <= 2 && d.precision() - d.scale() <= 16 ? d : null;
                }
                default:
                    return null;
            }
        }

        /** event_time text -> epoch microseconds, null when it is not a real instant (Python's EventTimes). */
        private Long eventMicros(String text) {
            Matcher m = eventTime.matcher(text);
            if (!m.matches()) {
                return null;
            }
            long seconds;
            try {
                seconds = LocalDateTime.of(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)),
                        Integer.parseInt(m.group(3)), Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)),
                        Integer.parseInt(m.group(6))).toEpochSecond(ZoneOffset.UTC);
            } catch (DateTimeException | NumberFormatException exc) {
                return null;
            }
            String frac = m.group(7);
            long fraction = 0;
            if (frac != null) {
                StringBuilder padded = new StringBuilder(frac);
                while (padded.length() < 6) {
                    padded.append('0');
                }
                fraction = Long.parseLong(padded.toString());
            }
            return seconds * 1_000_000L + fraction;
        }

        /** The properties object as compact JSON with sorted keys (Python's properties_text), or null when it
         *  holds anything but strings without control characters or surrogates and 64-bit integers. */
        private static String propertiesText(JsonNode props) {
            TreeMap<String, JsonNode> sorted = new TreeMap<>();
            Iterator<Map.Entry<String, JsonNode>> it = props.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                if (!plain(e.getKey(), true)) {
                    return null;
                }
                sorted.put(e.getKey(), e.getValue());
            }
            StringBuilder sb = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<String, JsonNode> e : sorted.entrySet()) {
                JsonNode v = e.getValue();
                if (!first) {
                    sb.append(',');
                }
                first = false;
                quote(sb, e.getKey());
                sb.append(':');
                if (v.isTextual() && plain(v.textValue(), true)) {
                    quote(sb, v.textValue());
                } else if (v.isInt() || v.isLong()) {
                    sb.append(v.longValue());
                } else {
                    return null;
                }
            }
            return sb.append('}').toString();
        }

        private static void quote(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                if (ch == '"' || ch == '\\') {
                    sb.append('\\');
                }
                sb.append(ch);
            }
            sb.append('"');
        }
    }

    /** No UTF-16 surrogate (so Java's length is Python's len, and sorting by char is by code point), and with
     *  {@code noControl} no character below U+0020 (escaped differently by Python's and Java's writers). */
    static boolean plain(String s, boolean noControl) {
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            if (Character.isSurrogate(ch) || (noControl && ch < 0x20)) {
                return false;
            }
        }
        return true;
    }
}
