//! The OTLP trace export request (`ExportTraceServiceRequest` of
//! `opentelemetry/proto/collector/trace/v1`), encoded as protobuf by hand: the handful of
//! messages a span needs, so the build carries no protobuf toolchain or SDK.
//!
//! Field numbers are those of opentelemetry-proto 1.x (`trace/v1/trace.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto`).

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

/// A finished span, ready to export.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    /// `SpanKind`: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Vec<(String, Value)>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    /// W3C trace flags (bit 0: sampled).
    pub flags: u32,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    bytes_field(out, field, &inner);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    key(out, field, 5);
    out.extend_from_slice(&v.to_le_bytes());
}

fn int_field(out: &mut Vec<u8>, field: u32, v: i64) {
    key(out, field, 0);
    varint(out, v as u64);
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string 1, bool 2, int 3,
/// double 4 }`.
fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    message(out, field, |kv| {
        bytes_field(kv, 1, k.as_bytes());
        message(kv, 2, |any| match v {
            Value::Str(s) => bytes_field(any, 1, s.as_bytes()),
            Value::Bool(b) => int_field(any, 2, i64::from(*b)),
            Value::Int(i) => int_field(any, 3, *i),
            Value::Double(d) => fixed64(any, 4, d.to_bits()),
        });
    });
}

/// `Span`: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
/// attributes 9, status 15 (`message` 2, `code` 3), flags 16.
fn span(out: &mut Vec<u8>, s: &SpanRecord) {
    message(out, 2, |m| {
        bytes_field(m, 1, &s.trace_id);
        bytes_field(m, 2, &s.span_id);
        if let Some(p) = &s.parent_span_id {
            bytes_field(m, 4, p);
        }
        bytes_field(m, 5, s.name.as_bytes());
        int_field(m, 6, i64::from(s.kind));
        fixed64(m, 7, s.start_unix_nano);
        fixed64(m, 8, s.end_unix_nano);
        for (k, v) in &s.attributes {
            key_value(m, 9, k, v);
        }
        if s.status_code != 0 {
            message(m, 15, |st| {
                if !s.status_message.is_empty() {
                    bytes_field(st, 2, s.status_message.as_bytes());
                }
                int_field(st, 3, i64::from(s.status_code));
            });
        }
        fixed32(m, 16, s.flags);
    });
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }` with one
/// resource (`Resource.attributes` 1) and one scope (`ScopeSpans.scope` 1: name 1,
/// version 2; `ScopeSpans.spans` 2).
pub fn encode_request(
    resource: &[(String, Value)],
    scope: (&str, &str),
    spans: &[SpanRecord],
) -> Vec<u8> {
    let mut out = Vec::new();
    message(&mut out, 1, |rs| {
        message(rs, 1, |r| {
            for (k, v) in resource {
                key_value(r, 1, k, v);
            }
        });
        message(rs, 2, |ss| {
            message(ss, 1, |sc| {
                bytes_field(sc, 1, scope.0.as_bytes());
                bytes_field(sc, 2, scope.1.as_bytes());
            });
            for s in spans {
                span(ss, s);
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xAC, 0x02]);
        let mut v = Vec::new();
        int_field(&mut v, 3, -1);
        // A negative int64 is ten bytes, as protobuf's varint of its two's complement.
        assert_eq!(v.len(), 11);
    }

    #[test]
    fn a_key_value_encodes_as_protobuf_does() {
        let mut v = Vec::new();
        key_value(&mut v, 1, "a", &Value::Str("b".into()));
        // field 1, len 8: { key "a" } { value { string "b" } }
        assert_eq!(v, [0x0A, 8, 0x0A, 1, b'a', 0x12, 3, 0x0A, 1, b'b']);
    }
}
