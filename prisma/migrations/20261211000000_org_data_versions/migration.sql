-- Each org's data version, a new random value in the same transaction as every write to the tables
-- whose rows cached operator answers are made of (docs/decisions/0084-answer-cache-by-data-version.md).
-- The bearer check's statement reads it with the caller's role, at no extra round trip; an answer
-- kept for that version is what a read done then would see. Triggers, not the services, set it:
-- whatever path writes a row (a service, a migration, psql) moves the version. Random rather than
-- counted: a database restored from a backup and written again counts up through numbers it had
-- already used for other contents, while a random version names one state of the org's rows only.
-- CreateTable
CREATE TABLE "org_data_versions" (
    "org_id" UUID NOT NULL,
    "version" UUID NOT NULL,

    CONSTRAINT "org_data_versions_pkey" PRIMARY KEY ("org_id")
);

-- The org of the changed row (TG_ARGV[0] names its column: "id" on organizations, "org_id"
-- elsewhere), old and new, each given a new version. Only orgs that exist get a row: an org's delete
-- takes its row with it, and the cascade's deletes of its other rows add none back.
CREATE FUNCTION "bump_org_data_version"() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    "v_orgs" UUID[];
BEGIN
    IF TG_TABLE_NAME = 'organizations' AND TG_OP = 'DELETE' THEN
        DELETE FROM "org_data_versions" WHERE "org_id" = OLD."id";
        RETURN NULL;
    END IF;
    "v_orgs" := ARRAY[
        CASE WHEN TG_OP <> 'INSERT' THEN (to_jsonb(OLD) ->> TG_ARGV[0])::UUID END,
        CASE WHEN TG_OP <> 'DELETE' THEN (to_jsonb(NEW) ->> TG_ARGV[0])::UUID END
    ];
    INSERT INTO "org_data_versions" AS "v" ("org_id", "version")
    SELECT "o"."id", gen_random_uuid() FROM "organizations" "o" WHERE "o"."id" = ANY ("v_orgs")
    ON CONFLICT ("org_id") DO UPDATE SET "version" = "excluded"."version";
    RETURN NULL;
END;
$$;

CREATE TRIGGER "organizations_bump_org_data_version" AFTER INSERT OR UPDATE OR DELETE ON "organizations"
    FOR EACH ROW EXECUTE FUNCTION "bump_org_data_version"('id');
CREATE TRIGGER "users_bump_org_data_version" AFTER INSERT OR UPDATE OR DELETE ON "users"
    FOR EACH ROW EXECUTE FUNCTION "bump_org_data_version"('org_id');
