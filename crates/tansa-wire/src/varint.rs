//! LEB128 variable-length integers and zig-zag mapping of signed values.

/// Largest encoded size of a `u64`.
pub const MAX_LEN: usize = 10;

/// Encodes `value` into `buf` and returns the number of bytes written.
///
/// `buf` must have room for [`MAX_LEN`] bytes.
#[inline]
pub fn encode(mut value: u64, buf: &mut [u8; MAX_LEN]) -> usize {
    let mut i = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            buf[i] = byte;
            return i + 1;
        }
        buf[i] = byte | 0x80;
        i += 1;
    }
}

/// Number of bytes [`encode`] writes for `value`.
#[inline]
pub fn encoded_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Maps a signed value onto an unsigned one so that small magnitudes stay small.
#[inline]
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Error returned when decoding runs past the end of the input or overflows 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside the value.
    Truncated,
    /// The value does not fit in 64 bits.
    Overflow,
}

/// Decodes a value from the front of `input`, returning it and the bytes consumed.
#[inline]
pub fn decode(input: &[u8]) -> Result<(u64, usize), DecodeError> {
    // Most values of an event stream (time and address deltas, sizes, stack ids) take one
    // or two bytes.
    match *input {
        [b0, ..] if b0 < 0x80 => return Ok((u64::from(b0), 1)),
        [b0, b1, ..] if b1 < 0x80 => {
            return Ok((u64::from(b0 & 0x7f) | (u64::from(b1) << 7), 2));
        }
        _ => {}
    }
    decode_long(input)
}

#[inline(never)]
fn decode_long(input: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut value: u64 = 0;
    for (i, &byte) in input.iter().enumerate() {
        if i == MAX_LEN - 1 && byte > 1 {
            return Err(DecodeError::Overflow);
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        if i == MAX_LEN - 1 {
            return Err(DecodeError::Overflow);
        }
    }
    Err(DecodeError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edge_values() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut buf = [0u8; MAX_LEN];
            let n = encode(v, &mut buf);
            assert_eq!(n, encoded_len(v), "length of {v}");
            assert_eq!(decode(&buf[..n]), Ok((v, n)));
            assert_eq!(decode(&buf[..n - 1]), Err(DecodeError::Truncated));
        }
    }

    #[test]
    fn zigzag_is_a_bijection_on_small_and_extreme_values() {
        for v in [0i64, -1, 1, -64, 63, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn rejects_overlong_input() {
        let buf = [0xffu8; 11];
        assert_eq!(decode(&buf), Err(DecodeError::Overflow));
    }
}
