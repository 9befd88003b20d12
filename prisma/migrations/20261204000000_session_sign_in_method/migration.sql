-- How a session family began (docs/decisions/0061-operator-single-sign-on.md): once an org
-- enforces single sign-on, its non-admins' password sessions stop working. Families from before
-- this column count as password ones: at worst, a non-admin signs in again through single sign-on.
ALTER TABLE "session_families" ADD COLUMN "signed_in_with" TEXT NOT NULL DEFAULT 'password';
ALTER TABLE "session_families" ADD CONSTRAINT "session_families_signed_in_with_check" CHECK ("signed_in_with" IN ('password', 'sso'));
