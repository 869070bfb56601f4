//! Reading JSON that nests deeper than serde_json's default limit (128): the pattern trees
//! of long chains, in `analyze`'s output and in `paths`' checkpoints. Such input is read
//! with serde_json's limit off and the depth bounded here ([`MAX_NESTING`]), by a scan made
//! only when the default read fails, so that hostile input cannot exhaust the stack and
//! ordinary input costs nothing more. No state.

use serde::de::DeserializeOwned;

/// The deepest nesting of arrays and objects read: a path is cut at 256 messages and its
/// pattern tree nests two levels per message, under a few levels of the record or checkpoint
/// that holds it.
pub const MAX_NESTING: usize = 1024;

/// Parses `bytes` as one JSON value of type `T`, nested at most [`MAX_NESTING`] arrays and
/// objects deep; deeper input is an error, as is anything after the value.
pub fn from_slice_nested<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    from_slice_within(bytes, MAX_NESTING)
}

/// [`from_slice_nested`] with the bound `max_depth`.
fn from_slice_within<T: DeserializeOwned>(bytes: &[u8], max_depth: usize) -> Result<T, String> {
    let first = match serde_json::from_slice(bytes) {
        Ok(value) => return Ok(value),
        Err(e) => e.to_string(),
    };
    // serde_json refuses past 128 levels (its limit counts from 128 down, so the text's own
    // depth tells whether that was the cause).
    let depth = nesting(bytes);
    if depth < 128 {
        return Err(first);
    }
    if depth > max_depth {
        return Err(format!("nested {depth} deep, more than {max_depth}"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let value = T::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// The deepest nesting of arrays and objects in JSON text (brackets inside strings not
/// counted). Linear in the text.
pub fn nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn brackets_in_strings_do_not_count() {
        assert_eq!(nesting(br#"{"a": "[[[{{", "b": [1, {"c": "\"]"}]}"#), 3);
        assert_eq!(nesting(b"7"), 0);
    }

    #[test]
    fn deep_values_are_read_up_to_the_bound() {
        let deep = format!("{}1{}", "[".repeat(500), "]".repeat(500));
        assert!(from_slice_within::<Value>(deep.as_bytes(), 500).is_ok());
        let err = from_slice_within::<Value>(deep.as_bytes(), 499).unwrap_err();
        assert!(err.contains("500 deep"), "{err}");
        assert!(from_slice_within::<Value>(b"[1] x", 10).is_err());
        // serde_json's default would refuse at 128.
        assert!(serde_json::from_slice::<Value>(deep.as_bytes()).is_err());
        // Around serde_json's own limit, and a malformed deep value.
        for n in [126, 127, 128, 129] {
            let v = format!("{}1{}", "[".repeat(n), "]".repeat(n));
            assert!(from_slice_nested::<Value>(v.as_bytes()).is_ok(), "{n}");
        }
        let broken = format!("{}1{}", "[".repeat(300), "]".repeat(299));
        assert!(from_slice_nested::<Value>(broken.as_bytes()).is_err());
    }
}
