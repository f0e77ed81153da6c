//! A small JSON-schema checker for tool parameters: `type` (object, string, integer,
//! number, boolean, array), `properties`, `required`, `additionalProperties: false`,
//! `enum`, `minimum`, `maximum` and `items`. Enough for parameters; errors name the path.

use serde_json::Value;

/// Check `value` against `schema`; the error names the offending path.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "$")
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    if let Some(t) = s.get("type").and_then(Value::as_str) {
        if !type_ok(t, v) {
            return Err(format!("{path} must be of type {t}, got {v}"));
        }
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            return Err(format!(
                "{path} must be one of {}, got {v}",
                Value::Array(options.clone())
            ));
        }
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            return Err(format!("{path} must be at least {min}, got {x}"));
        }
    }
    if let (Some(max), Some(x)) = (s.get("maximum").and_then(Value::as_f64), v.as_f64()) {
        if x > max {
            return Err(format!("{path} must be at most {max}, got {x}"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(req) = s.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}.{r} is required"));
                }
            }
        }
        for (k, x) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(sub) => check(sub, x, &format!("{path}.{k}"))?,
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    let known: Vec<&String> = props.map(|p| p.keys().collect()).unwrap_or_default();
                    return Err(format!(
                        "{path}.{k} is not a known parameter (known: {})",
                        known
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(items, x, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_types_ranges_and_unknown_keys() {
        let s = json!({"type": "object", "additionalProperties": false, "required": ["k"],
            "properties": {"k": {"type": "integer", "minimum": 1, "maximum": 1000},
                           "mode": {"enum": ["a", "b"]},
                           "w": {"type": "array", "items": {"type": "number"}}}});
        assert!(validate(&s, &json!({"k": 5, "mode": "a", "w": [0.5, 1]})).is_ok());
        assert!(validate(&s, &json!({}))
            .unwrap_err()
            .contains("$.k is required"));
        assert!(validate(&s, &json!({"k": 0}))
            .unwrap_err()
            .contains("at least 1"));
        assert!(validate(&s, &json!({"k": "5"}))
            .unwrap_err()
            .contains("type integer"));
        assert!(validate(&s, &json!({"k": 5, "mode": "c"}))
            .unwrap_err()
            .contains("one of"));
        assert!(validate(&s, &json!({"k": 5, "x": 1}))
            .unwrap_err()
            .contains("$.x is not a known parameter"));
        assert!(validate(&s, &json!({"k": 5, "w": [1, "a"]}))
            .unwrap_err()
            .contains("$.w[1]"));
    }
}
