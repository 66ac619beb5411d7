// The wire's audio: base64 of little-endian pcm16 (REALTIME_CONTRACT), to and from the samples
// the worklets exchange. Pure, so node tests it (tests/js/page-parts.test.mjs).

// An odd trailing byte (half a sample) is dropped.
export function b64ToInt16(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length & ~1);
  for (let i = 0; i < bytes.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}

// In slices: String.fromCharCode.apply takes a bounded number of arguments.
export function bytesToB64(buffer) {
  const bytes = new Uint8Array(buffer);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}
