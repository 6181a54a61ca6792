//! Page cursors of the newest-first listings (memories, audit log): `{unix microseconds}_{id}`
//! of the last item of a page. Opaque to clients, the same on both backends.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::ApiError;

pub(crate) fn encode(at: DateTime<Utc>, id: Uuid) -> String {
    format!("{}_{id}", at.timestamp_micros())
}

pub(crate) fn decode(text: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let invalid = || ApiError::Invalid("cursor: not a cursor this API returned".into());
    let (micros, id) = text.split_once('_').ok_or_else(invalid)?;
    let at = DateTime::from_timestamp_micros(micros.parse().map_err(|_| invalid())?).ok_or_else(invalid)?;
    Ok((at, Uuid::parse_str(id).map_err(|_| invalid())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let at = DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap();
        let id = Uuid::new_v4();
        assert_eq!(decode(&encode(at, id)).unwrap(), (at, id));
        for garbage in [
            "",
            "x",
            "12_",
            "_uuid",
            "12_not-a-uuid",
            "abc_00000000-0000-0000-0000-000000000000",
        ] {
            assert!(decode(garbage).is_err(), "{garbage}");
        }
    }
}
