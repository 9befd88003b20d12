/** The part of sodium-native (libsodium's bindings, which ship no types) that src/lib/ed25519.ts uses. */
declare module 'sodium-native' {
  const sodium: {
    crypto_sign_BYTES: number;
    crypto_sign_SECRETKEYBYTES: number;
    crypto_sign_detached(signature: Buffer, message: Uint8Array, secretKey: Buffer): void;
    sodium_malloc(size: number): Buffer;
  };
  export default sodium;
}
