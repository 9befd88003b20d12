-- Operators' single sign-on (docs/decisions/0061-operator-single-sign-on.md).

-- A user provisioned by single sign-on has no password: password login never matches them.
ALTER TABLE "users" ALTER COLUMN "password_hash" DROP NOT NULL;

-- An org's OpenID provider. The client secret is sealed with KEY_ENCRYPTION_KEY (src/lib/secret-box.ts).
CREATE TABLE "org_sso" (
    "org_id" UUID NOT NULL,
    "issuer" TEXT NOT NULL,
    "client_id" TEXT NOT NULL,
    "client_secret" TEXT NOT NULL,
    "allowed_domains" TEXT[],
    "default_role" "UserRole" NOT NULL,
    "role_claim" TEXT,
    "role_map" JSONB,
    "scopes" TEXT[],
    "enforce" BOOLEAN NOT NULL DEFAULT false,
    "allow_private_network" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "org_sso_pkey" PRIMARY KEY ("org_id")
);
ALTER TABLE "org_sso" ADD CONSTRAINT "org_sso_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- A sign-in on its way through the provider: found by the SHA-256 of its `state`, bound to the
-- browser that started it by the SHA-256 of a cookie, used once, 10 minutes.
CREATE TABLE "sso_logins" (
    "state_hash" TEXT NOT NULL,
    "org_id" UUID NOT NULL,
    "browser_hash" TEXT NOT NULL,
    "nonce" TEXT NOT NULL,
    "code_verifier" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "sso_logins_pkey" PRIMARY KEY ("state_hash")
);
CREATE INDEX "sso_logins_expires_at_idx" ON "sso_logins"("expires_at");
ALTER TABLE "sso_logins" ADD CONSTRAINT "sso_logins_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The one-time code the console exchanges for a session: SHA-256 only, used once, 60 seconds.
CREATE TABLE "sso_codes" (
    "code_hash" TEXT NOT NULL,
    "user_id" UUID NOT NULL,
    "org_id" UUID NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "sso_codes_pkey" PRIMARY KEY ("code_hash")
);
CREATE INDEX "sso_codes_expires_at_idx" ON "sso_codes"("expires_at");
ALTER TABLE "sso_codes" ADD CONSTRAINT "sso_codes_user_id_fkey" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE ON UPDATE CASCADE;
