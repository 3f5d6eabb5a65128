//! Reading a structured fuzz input (a header, then a stream of operations) from raw bytes, and
//! writing one for a seed. Every read succeeds: past the end a byte reads as 0 and a chunk as
//! empty, so any byte string is a valid input and mutations never make one unreadable.

/// Reads bytes front to back.
pub struct Cursor<'a> {
    data: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next operation code; None at the end of the input.
    pub fn op(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    pub fn u8(&mut self) -> u8 {
        self.op().unwrap_or(0)
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u16())
            | u64::from(self.u16()) << 16
            | u64::from(self.u16()) << 32
            | u64::from(self.u16()) << 48
    }

    /// A chunk: a 2-byte little-endian length, then up to that many bytes (fewer at the end).
    pub fn chunk(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16()).min(self.data.len());
        let (chunk, rest) = self.data.split_at(n);
        self.data = rest;
        chunk
    }
}

/// Writes what `Cursor` reads.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    pub fn u8(&mut self, b: u8) -> &mut Writer {
        self.bytes.push(b);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Writer {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Writer {
        for i in 0..4 {
            self.u16((v >> (16 * i)) as u16);
        }
        self
    }

    /// A chunk; one longer than a length can say is cut (seeds are small).
    pub fn chunk(&mut self, data: &[u8]) -> &mut Writer {
        let n = data.len().min(usize::from(u16::MAX));
        self.u16(n as u16);
        self.bytes.extend_from_slice(&data[..n]);
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_writer_writes_the_cursor_reads() {
        let bytes = Writer::new()
            .u8(7)
            .u16(513)
            .u64(0x0102_0304_0506_0708)
            .chunk(b"abc")
            .finish();
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u8(), 7);
        assert_eq!(c.u16(), 513);
        assert_eq!(c.u64(), 0x0102_0304_0506_0708);
        assert_eq!(c.chunk(), b"abc");
        assert!(c.is_empty());
        assert_eq!(c.op(), None);
        assert_eq!(c.u16(), 0);
        assert_eq!(c.chunk(), b"");
    }
}
