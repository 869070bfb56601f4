//! [`Writer`]: writes a log from owned values, for tools and tests (the preload library has its
//! own allocation-free encoder, tested against this one).

use std::io::{self, Write};

use crate::header::LogHeader;
use crate::record::Record;
use crate::syscall::Syscall;

/// Writes a log: the header at creation, then records; [`Writer::finish`] adds the
/// end-of-log record.
#[derive(Debug)]
pub struct Writer<W: Write> {
    inner: W,
    buf: Vec<u8>,
}

fn invalid(e: crate::EncodeError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl<W: Write> Writer<W> {
    /// Writes the header to `inner`.
    pub fn new(mut inner: W, header: &LogHeader) -> io::Result<Writer<W>> {
        inner.write_all(&header.to_bytes().map_err(invalid)?)?;
        Ok(Writer {
            inner,
            buf: Vec::new(),
        })
    }

    /// Writes one record.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        self.buf.clear();
        record.encode(&mut self.buf).map_err(invalid)?;
        self.inner.write_all(&self.buf)
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Writes the end-of-log record (at `time_ns`, from thread `tid`), flushes and returns the
    /// underlying writer.
    pub fn finish(mut self, time_ns: u64, tid: u32) -> io::Result<W> {
        self.write(&Record::new(Syscall::End, time_ns, tid, -1, 0))?;
        self.inner.flush()?;
        Ok(self.inner)
    }

    /// Returns the underlying writer without an end-of-log record, as a killed process leaves
    /// its log.
    pub fn into_inner(self) -> W {
        self.inner
    }
}
