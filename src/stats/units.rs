//! Serde adapters that put a quantity's unit in its key rather than in its shape
//! (`crate::results::schema`'s convention for every JSON document rttlab writes).

/// A `Duration` in JSON as seconds (`"duration_s": 1.5`), the unit in the key
/// (`schema`'s convention); read back from seconds or from serde's own
/// `{"secs", "nanos"}`, which results of rttlab 0.1 hold.
pub mod seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// # Errors
    /// Neither form, or a negative or non-finite number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Seconds(f64),
            Serde(Duration),
        }
        match Form::deserialize(d)? {
            Form::Seconds(s) => Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom),
            Form::Serde(d) => Ok(d),
        }
    }
}
